//! Databases of a test's own on the PostgreSQL server the tests use
//! (`TOLLGATE_POSTGRES_URL`, by default the local server as `postgres`,
//! trusted), made and dropped with `psql`, so that tests never see each
//! other's data; and roles with passwords or without rights, for the
//! tests of refused logins and missing rights.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The server the tests use, as an administrator: a URL without a
/// database's path, to which a test's database is appended.
pub fn server_url() -> String {
    std::env::var("TOLLGATE_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".to_owned())
}

/// A name no other test of any process uses.
fn unique(kind: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "tollgate_{kind}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `sql` with `psql` on `database` of the server, as its
/// administrator, and returns what it printed (unaligned, tuples only).
///
/// # Panics
///
/// When `psql` cannot run or the statement fails: the test cannot go on.
pub fn psql(database: &str, sql: &str) -> String {
    let output = Command::new("psql")
        .arg(format!("{}/{database}", server_url()))
        .args(["-v", "ON_ERROR_STOP=1", "-qtA", "-c", sql])
        .output()
        .expect("psql runs (the PostgreSQL client)");
    assert!(
        output.status.success(),
        "psql {sql:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A database made for one test, dropped (with its connections) on drop,
/// with the roles made for it.
pub struct TestDatabase {
    name: String,
    roles: Vec<String>,
}

impl TestDatabase {
    /// A new, empty database.
    pub fn create() -> Self {
        let name = unique("test");
        psql("postgres", &format!("CREATE DATABASE {name}"));
        Self {
            name,
            roles: Vec::new(),
        }
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URL of the database, as the administrator.
    pub fn url(&self) -> String {
        format!("{}/{}", server_url(), self.name)
    }

    /// The URL of the database as `user` with `password`, on the
    /// administrator URL's host and port.
    pub fn url_as(&self, user: &str, password: &str) -> String {
        let server = server_url();
        let host = server.rsplit_once('@').map_or(server.as_str(), |(_, host)| host);
        format!("postgres://{user}:{password}@{host}/{}", self.name)
    }

    /// Runs `sql` on the database as the administrator.
    pub fn sql(&self, sql: &str) -> String {
        psql(&self.name, sql)
    }

    /// A new role that logs in with `password`, dropped with the database.
    /// It may connect to the database (as any role may, through `PUBLIC`)
    /// and has no other rights: on PostgreSQL 15 it may not create a
    /// schema in the database, nor objects in `public`.
    pub fn role(&mut self, password: &str) -> String {
        let role = unique("role");
        psql(
            "postgres",
            &format!("CREATE ROLE {role} LOGIN PASSWORD '{password}'"),
        );
        self.roles.push(role.clone());
        role
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let drop_database = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let _ = Command::new("psql")
            .arg(format!("{}/postgres", server_url()))
            .args(["-qtA", "-c", &drop_database])
            .output();
        for role in &self.roles {
            let _ = Command::new("psql")
                .arg(format!("{}/postgres", server_url()))
                .args(["-qtA", "-c", &format!("DROP ROLE IF EXISTS {role}")])
                .output();
        }
    }
}
