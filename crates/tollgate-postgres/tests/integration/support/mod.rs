//! A database of the test's own on the PostgreSQL server the tests use
//! (`TOLLGATE_POSTGRES_URL`, by default the local server as `postgres`),
//! dropped when the test ends, so tests never see each other's data: the
//! workspace's [`postgres_databases::TestDatabase`], made without blocking
//! the test's runtime, with its URLs through a proxy or under another host
//! name and clients for reading what the backend wrote.

use std::net::{SocketAddr, ToSocketAddrs};

use tokio_postgres::NoTls;
pub(crate) use tollgate_test_support::postgres_databases::{self, server_url};

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

/// A database made for one test ([`postgres_databases::TestDatabase`]),
/// dropped (with its connections) on drop.
pub(crate) struct TestDatabase(postgres_databases::TestDatabase);

impl TestDatabase {
    /// A new, empty database, made with `psql` on a blocking thread so
    /// that the test's runtime goes on.
    pub(crate) async fn create() -> Self {
        let database = tokio::task::spawn_blocking(postgres_databases::TestDatabase::create)
            .await
            .unwrap_or_else(|err| panic!("creating a test database: {err}"));
        Self(database)
    }

    /// The URL of the database.
    pub(crate) fn url(&self) -> String {
        self.0.url()
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

    /// Has the database count the calls of its PL/pgSQL functions, for the
    /// connections made from now on.
    pub(crate) async fn track_functions(&self) {
        let name = self.url().rsplit('/').next().unwrap().to_owned();
        self.client()
            .await
            .batch_execute(&format!("ALTER DATABASE {name} SET track_functions = 'pl'"))
            .await
            .unwrap();
    }

    /// The calls of the schema `tollgate`'s functions `names` the database
    /// counted, once they reach `at_least` or after 10 s (a connection
    /// reports its counts when it ends, or within a second or so).
    pub(crate) async fn function_calls(&self, names: &[&str], at_least: i64) -> i64 {
        let client = self.client().await;
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let row = client
                .query_one(
                    "SELECT coalesce(sum(calls), 0)::int8 FROM pg_stat_user_functions \
                     WHERE schemaname = 'tollgate' AND funcname = ANY($1)",
                    &[&names],
                )
                .await
                .unwrap();
            let calls: i64 = row.get(0);
            if calls >= at_least || tokio::time::Instant::now() > deadline {
                return calls;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// A client of the database, for reading what the backend wrote.
    pub(crate) async fn client(&self) -> tokio_postgres::Client {
        connect(&self.url()).await
    }
}

/// A connection to `url`, its driver running on the current runtime.
pub(crate) async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap_or_else(|e| {
        panic!("no PostgreSQL server at {url}: {e} (start one, or set TOLLGATE_POSTGRES_URL)")
    });
    tokio::spawn(connection);
    client
}
