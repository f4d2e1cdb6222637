//! Servers on free loopback ports, started in this process, and files for
//! their configuration.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate_server::{Reloader, ServerBuilder, ServerError};

/// A started server.
pub struct Running {
    pub http: SocketAddr,
    pub grpc: Option<SocketAddr>,
    pub reloader: Reloader,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServerError>>>,
}

/// The loopback address with a port the system picks.
pub fn any_port() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Binds and runs `builder` (on free ports, without watching files or
/// SIGHUP unless the builder says otherwise).
pub async fn start(builder: ServerBuilder) -> Running {
    let server = builder.bind().await.expect("the server starts");
    let (stop, stopped) = oneshot::channel::<()>();
    let running = Running {
        http: server.local_addr(),
        grpc: server.grpc_local_addr(),
        reloader: server.reloader(),
        stop: Some(stop),
        task: None,
    };
    let task = tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    Running {
        task: Some(task),
        ..running
    }
}

/// A builder for `files` on free ports, reloading only on demand.
pub fn builder(files: &[&Path]) -> ServerBuilder {
    let mut builder = tollgate_server::Server::builder()
        .listen(any_port())
        .watch_files(false)
        .reload_on_sighup(false);
    for file in files {
        builder = builder.config(*file);
    }
    builder
}

impl Running {
    /// `http://ADDR{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.http)
    }

    /// Stops the server and waits for it to drain.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("the server stops")
                .expect("the server task")
                .expect("the server ran without error");
        }
    }
}

/// Writes `text` to `dir/name`.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A JSON answer: status and parsed body.
pub async fn json(response: reqwest::Response) -> (u16, serde_json::Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, value)
}

/// `POST /v1/decide` with `body`.
pub async fn decide(client: &reqwest::Client, server: &Running, body: &str) -> (u16, serde_json::Value) {
    let response = client
        .post(server.url("/v1/decide"))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    json(response).await
}
