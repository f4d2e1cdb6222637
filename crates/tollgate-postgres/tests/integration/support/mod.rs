//! A database of the test's own on the PostgreSQL server the tests use
//! (`TOLLGATE_POSTGRES_URL`, by default the local server as `postgres`),
//! dropped when the test ends, so tests never see each other's data.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};

use tokio_postgres::NoTls;

/// The server the tests use, as an administrator: a URL without a
/// database name's path, to which the test's database is appended.
pub(crate) fn server_url() -> String {
    std::env::var("TOLLGATE_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned())
}

/// The server's `host:port`, as [`server_url`] names it.
fn server_host_port() -> String {
    let url = server_url();
    let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

/// The server's address, for a proxy in front of it.
pub(crate) fn server_addr() -> SocketAddr {
    let host_port = server_host_port();
    host_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .unwrap_or_else(|| panic!("{host_port}: not an address"))
}

/// A database made for one test, dropped (with its connections) on drop.
pub(crate) struct TestDatabase {
    name: String,
}

impl TestDatabase {
    /// A new, empty database.
    pub(crate) async fn create() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "tollgate_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        admin(&format!("CREATE DATABASE {name}")).await;
        Self { name }
    }

    /// The URL of the database.
    pub(crate) fn url(&self) -> String {
        format!("{}/{}", server_url(), self.name)
    }

    /// The database's URL through `addr` (a proxy) in place of the
    /// server's address, without TLS.
    pub(crate) fn url_through(&self, addr: SocketAddr) -> String {
        let url = self.url().replacen(&server_host_port(), &addr.to_string(), 1);
        format!("{url}?sslmode=disable")
    }

    /// The database's URL with `host` in place of the server's host.
    pub(crate) fn named_host(&self, host: &str) -> String {
        self.url().replacen("127.0.0.1", host, 1)
    }

    /// A client of the database, for reading what the backend wrote.
    pub(crate) async fn client(&self) -> tokio_postgres::Client {
        connect(&self.url()).await
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // A runtime of its own: the test's may be gone or single-threaded.
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(admin(&sql));
        })
        .join();
    }
}

/// Runs `sql` on the server's `postgres` database.
async fn admin(sql: &str) {
    let client = connect(&format!("{}/postgres", server_url())).await;
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A connection to `url`, its driver running on the current runtime.
pub(crate) async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap_or_else(|e| {
        panic!("no PostgreSQL server at {url}: {e} (start one, or set TOLLGATE_POSTGRES_URL)")
    });
    tokio::spawn(connection);
    client
}
