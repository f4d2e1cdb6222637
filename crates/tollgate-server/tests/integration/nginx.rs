//! `/v1/auth` behind a real nginx (`auth_request`), configured with the
//! example file the guide shows (docs/service.md), examples/serve/nginx.conf.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{self, start};

/// The example server block.
fn example() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/serve/nginx.conf");
    std::fs::read_to_string(path).unwrap()
}

/// The nginx binary, if installed.
fn nginx_binary() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// nginx in the foreground, killed when dropped.
struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_nginx(binary: &Path, dir: &Path, port: u16, tollgate: std::net::SocketAddr) -> Nginx {
    let server = example()
        .replace("listen 127.0.0.1:8000;", &format!("listen 127.0.0.1:{port};"))
        .replace(
            "http://127.0.0.1:8080/v1/auth",
            &format!("http://{tollgate}/v1/auth"),
        )
        .replace("http://127.0.0.1:3000", &format!("http://{tollgate}/healthz"));
    assert!(server.contains(&tollgate.to_string()) && server.contains(&port.to_string()));
    std::fs::write(dir.join("server.conf"), server).unwrap();
    let temp = |name: &str| {
        let path = dir.join(name);
        std::fs::create_dir_all(&path).unwrap();
        path.display().to_string()
    };
    let main = format!(
        "daemon off;
master_process off;
user root;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {body};
    proxy_temp_path {proxy};
    fastcgi_temp_path {fastcgi};
    uwsgi_temp_path {uwsgi};
    scgi_temp_path {scgi};
    include {dir}/server.conf;
}}
",
        dir = dir.display(),
        body = temp("body"),
        proxy = temp("proxy"),
        fastcgi = temp("fastcgi"),
        uwsgi = temp("uwsgi"),
        scgi = temp("scgi"),
    );
    std::fs::write(dir.join("nginx.conf"), main).unwrap();
    let child = Command::new(binary)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .arg("-p")
        .arg(dir)
        .stdin(Stdio::null())
        .spawn()
        .expect("nginx starts");
    let nginx = Nginx(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nginx did not listen: {:?}",
            std::fs::read_to_string(dir.join("error.log"))
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    nginx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_auth_request_admits_up_to_the_limit() {
    let Some(binary) = nginx_binary() else {
        eprintln!("SKIPPED: nginx is not installed (apt-get install nginx; .ci/run installs it)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(
        dir.path(),
        "p.yaml",
        "tollgate:
  default: { limit: 1000, window: 1h }
  resources:
    api: { limit: 7, window: 1h, strategy: fixed_window }
",
    );
    let server = start(support::builder(&[&file]).auth_deny_status(403)).await;
    let port = tollgate_test_support::redis::free_port();
    let _nginx = start_nginx(&binary, dir.path(), port, server.http);
    let client = reqwest::Client::new();
    let (mut ok, mut limited) = (0, 0);
    for i in 0..12 {
        let response = client
            .get(format!("http://127.0.0.1:{port}/"))
            .send()
            .await
            .unwrap();
        let headers = response.headers().clone();
        match response.status().as_u16() {
            200 => {
                ok += 1;
                assert_eq!(headers["ratelimit-remaining"], (6 - i).to_string().as_str());
                assert_eq!(response.text().await.unwrap(), r#"{"status":"ok"}"#);
            }
            429 => {
                limited += 1;
                let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
                assert!((1..=3600).contains(&retry), "{retry}");
            }
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!((ok, limited), (7, 5));
    server.stop().await;
}
