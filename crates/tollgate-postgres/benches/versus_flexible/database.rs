//! The benchmark's own database on the server, made for the run and
//! dropped (with its connections) at its end.

use std::time::{Duration, Instant};

use tokio_postgres::NoTls;

/// The server, as an administrator: `TOLLGATE_POSTGRES_URL` (as the tests
/// read it), by default the local server as `postgres`; a URL without a
/// database name, to which the bench database's is appended.
pub(crate) fn server_url() -> String {
    std::env::var("TOLLGATE_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned())
}

/// A database of this run's own.
pub(crate) struct BenchDatabase {
    pub(crate) name: String,
}

impl BenchDatabase {
    /// Creates `tollgate_bench_<pid>`.
    pub(crate) async fn create() -> Self {
        let name = format!("tollgate_bench_{}", std::process::id());
        admin(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
        admin(&format!("CREATE DATABASE {name}")).await;
        Self { name }
    }

    /// The database's URL.
    pub(crate) fn url(&self) -> String {
        format!("{}/{}", server_url(), self.name)
    }

    /// Waits until no connection to the database is left (those of the run
    /// before have closed), so that runs do not overlap.
    pub(crate) async fn wait_idle(&self) {
        let client = connect(&format!("{}/postgres", server_url())).await;
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            let row = client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
                    &[&self.name],
                )
                .await
                .expect("read pg_stat_activity");
            if row.get::<_, i64>(0) == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("connections to {} still open after 10 s", self.name);
    }

    /// The server's version and its default `synchronous_commit`, what a
    /// connection that sets nothing commits with.
    pub(crate) async fn server_settings(&self) -> (String, String) {
        let client = connect(&self.url()).await;
        let show = |sql: &'static str| {
            let client = &client;
            async move {
                let row = client.query_one(sql, &[]).await.expect(sql);
                row.get::<_, String>(0)
            }
        };
        (
            show("SHOW server_version").await,
            show("SHOW synchronous_commit").await,
        )
    }

    /// Drops the database and its connections.
    pub(crate) async fn drop_now(self) {
        admin(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)).await;
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
async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap_or_else(|e| {
        panic!("no PostgreSQL server at {url}: {e} (start one, or set TOLLGATE_POSTGRES_URL)")
    });
    tokio::spawn(connection);
    client
}
