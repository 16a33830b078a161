//! The `zarrd` binary: serving, health, graceful shutdown on SIGTERM,
//! `check-config`, `--help`, the embedded default mount, and environment
//! overrides.
//!
//! Every server binds 127.0.0.1 port 0 and reports its address on stdout
//! (`zarrd listening on http://ADDR`); every wait is bounded, and a child
//! left behind by a failing test is killed when its handle drops.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

const START_TIMEOUT: Duration = Duration::from_secs(20);
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// The zarrd binary, with no `ZARRD_*` variables from the test environment.
fn zarrd() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zarrd"));
    for (name, _) in std::env::vars() {
        if name.starts_with("ZARRD_") {
            cmd.env_remove(name);
        }
    }
    cmd.env("RUST_LOG", "info").stdin(Stdio::null()).kill_on_drop(true);
    cmd
}

/// A running `zarrd serve`.
struct Server {
    child: Child,
    addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    async fn start(mut cmd: Command) -> Self {
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn zarrd");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err_pipe = child.stderr.take().expect("stderr");
        let sink = Arc::clone(&stderr);
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let addr = tokio::time::timeout(START_TIMEOUT, async {
            while let Some(line) = lines.next_line().await.expect("read stdout") {
                if let Some(addr) = line.strip_prefix("zarrd listening on http://") {
                    return addr.trim().parse::<SocketAddr>().expect("listening address");
                }
            }
            panic!("zarrd exited before listening; stderr:\n{}", stderr.lock().unwrap());
        })
        .await
        .unwrap_or_else(|_| panic!("zarrd did not report listening within {START_TIMEOUT:?}"));
        // Keep draining stdout so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self { child, addr, stderr }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Sends SIGTERM to this child (by its process id).
    async fn sigterm(&self) {
        let pid = self.child.id().expect("child still running");
        let status = Command::new("kill").arg("-TERM").arg(pid.to_string()).status().await.expect("run kill");
        assert!(status.success(), "kill -TERM {pid} failed");
    }

    /// Waits (bounded) for the child to exit.
    async fn exit_status(&mut self) -> ExitStatus {
        match tokio::time::timeout(EXIT_TIMEOUT, self.child.wait()).await {
            Ok(status) => status.expect("wait for zarrd"),
            Err(_) => panic!("zarrd did not exit within {EXIT_TIMEOUT:?}; stderr:\n{}", self.stderr()),
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// SIGTERM, then a clean exit.
    async fn stop(mut self) {
        self.sigterm().await;
        let status = self.exit_status().await;
        assert!(status.success(), "zarrd exited with {status} after SIGTERM; stderr:\n{}", self.stderr());
    }
}

/// Runs a command to completion (bounded), returning (status, stdout, stderr).
async fn run(mut cmd: Command) -> (ExitStatus, String, String) {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn zarrd");
    let out = tokio::time::timeout(EXIT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("zarrd did not finish within {EXIT_TIMEOUT:?}"))
        .expect("zarrd output");
    (out.status, String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn serve_cmd(args: &[&str]) -> Command {
    let mut cmd = zarrd();
    cmd.arg("serve").arg("--bind").arg("127.0.0.1:0").args(args);
    cmd
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

#[tokio::test]
async fn serve_answers_health_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mount = format!("data={}", path_str(dir.path()));
    let server = Server::start(serve_cmd(&["--mount", &mount])).await;
    let client = common::client();

    let r = client.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(v["status"], "ok");
    let r = client.get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);

    let r = client.put(server.url("/zarr/data/arr/c/0")).body("bytes").send().await.unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(std::fs::read(dir.path().join("arr/c/0")).unwrap(), b"bytes");
    let r = client.get(server.url("/zarr/data/arr/c/0")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"bytes");

    server.stop().await;
}

/// The CPU pool's threads and the async workers carry names (`top -H`,
/// `perf`): rayon's default pool would take the name of whichever thread
/// first used it.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn threads_are_named_by_their_role() {
    let dir = tempfile::tempdir().unwrap();
    let mount = format!("data={}", path_str(dir.path()));
    let server = Server::start(serve_cmd(&["--mount", &mount])).await;
    let pid = server.child.id().expect("running");
    let names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect();
    assert!(names.iter().any(|n| n == "zarrd-cpu-0"), "{names:?}");
    assert!(names.iter().any(|n| n == "zarrd-worker"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("rayon")), "{names:?}");
    server.stop().await;
}

#[tokio::test]
async fn sigterm_right_after_the_listening_line_is_a_clean_shutdown() {
    // Scripts stop zarrd as soon as it says it listens: the signal must
    // already be handled then (not kill the process, not be lost).
    let dir = tempfile::tempdir().unwrap();
    let mount = format!("data={}", path_str(dir.path()));
    for attempt in 0..20 {
        let mut server = Server::start(serve_cmd(&["--mount", &mount])).await;
        server.sigterm().await;
        let status = server.exit_status().await;
        assert!(
            status.success(),
            "attempt {attempt}: zarrd exited with {status} after an early SIGTERM; stderr:\n{}",
            server.stderr()
        );
    }
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_request_finish() {
    let dir = tempfile::tempdir().unwrap();
    let mount = format!("data={}", path_str(dir.path()));
    let mut server = Server::start(serve_cmd(&["--mount", &mount])).await;
    let addr = server.addr;

    // A PUT whose handler is waiting for its body: `Expect: 100-continue`
    // makes the server say so (it answers 100 when the handler reads the body).
    let mut conn = common::put_waiting_for_body(addr, "inflight", 10).await;

    server.sigterm().await;
    // Shutting down: new connections are refused (bounded wait)...
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(addr).await {
            Err(_) => break,
            Ok(_) if Instant::now() > deadline => panic!("zarrd still accepts connections 10 s after SIGTERM"),
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    // ...while the request already in flight completes.
    conn.write_all(b"0123456789").await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut rest)).await.expect("no answer").unwrap();
    assert!(!rest.is_empty(), "the in-flight PUT got no answer after SIGTERM; stderr:\n{}", server.stderr());
    let reply = common::parse_response(&rest, false);
    assert_eq!(reply.status, 201, "in-flight PUT after SIGTERM: {reply}");
    assert_eq!(std::fs::read(dir.path().join("inflight")).unwrap(), b"0123456789");

    let status = server.exit_status().await;
    assert!(status.success(), "zarrd exited with {status}; stderr:\n{}", server.stderr());
}

#[tokio::test]
async fn serve_without_mounts_serves_data_in_the_working_directory() {
    let cwd = tempfile::tempdir().unwrap();
    let mut cmd = serve_cmd(&[]);
    cmd.current_dir(cwd.path());
    let server = Server::start(cmd).await;
    assert!(cwd.path().join("data").is_dir(), "./data was not created");
    let client = common::client();
    let r = client.get(server.url("/zarr/data/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = client.put(server.url("/zarr/data/hello")).body("world").send().await.unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(std::fs::read(cwd.path().join("data/hello")).unwrap(), b"world");
    let r = client.get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    server.stop().await;
}

#[tokio::test]
async fn environment_variables_override_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let mount = format!("data={}", path_str(dir.path()));
    let mut cmd = serve_cmd(&["--mount", &mount]);
    cmd.env("ZARRD_LIMITS__MAX_PUT_BYTES", "10");
    let server = Server::start(cmd).await;
    let client = common::client();
    let r = client.put(server.url("/zarr/data/k")).body("0123456789").send().await.unwrap();
    assert_eq!(r.status(), 201);
    let r = client.put(server.url("/zarr/data/k")).body("0123456789A").send().await.unwrap();
    assert_eq!(r.status(), 413);
    server.stop().await;
}

#[tokio::test]
async fn unknown_environment_variables_are_warnings_naming_them_but_unknown_file_keys_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mount = format!("data={}", path_str(dir.path()));
    let mut cmd = serve_cmd(&["--mount", &mount]);
    // Another tool's variable, a misspelt option, and a real one that must still apply.
    cmd.env("ZARRD_BIN", "/usr/local/bin/zarrd");
    cmd.env("ZARRD_LIMITS__MAX_PUTBYTES", "1");
    cmd.env("ZARRD_LIMITS__MAX_PUT_BYTES", "10");
    let server = Server::start(cmd).await;
    let r = common::client().put(server.url("/zarr/data/k")).body("0123456789A").send().await.unwrap();
    assert_eq!(r.status(), 413, "ZARRD_LIMITS__MAX_PUT_BYTES still applies");
    let logs = server.stderr();
    server.stop().await;
    for name in ["ZARRD_BIN", "ZARRD_LIMITS__MAX_PUTBYTES"] {
        assert!(logs.lines().any(|l| l.contains("WARN") && l.contains(name)), "no warning naming {name}:\n{logs}");
    }
    assert!(!logs.contains("ZARRD_LIMITS__MAX_PUT_BYTES names no"), "{logs}");

    // check-config warns too; a bad value of a known option, and an unknown key in the file, stay errors.
    let config = dir.path().join("zarrd.toml");
    std::fs::write(&config, format!("[mounts.data]\nurl = \"{}\"\n", path_str(dir.path()))).unwrap();
    let mut cmd = zarrd();
    cmd.arg("check-config").arg(&config).env("ZARRD_BIN", "/x");
    let (status, _, stderr) = run(cmd).await;
    assert!(status.success() && stderr.contains("warning") && stderr.contains("ZARRD_BIN"), "{stderr}");
    let mut cmd = zarrd();
    cmd.arg("check-config").arg(&config).env("ZARRD_LIMITS__MAX_PUT_BYTES", "lots");
    let (status, _, stderr) = run(cmd).await;
    assert!(!status.success() && stderr.contains("max_put_bytes"), "{stderr}");
    std::fs::write(&config, format!("bin = 1\n[mounts.data]\nurl = \"{}\"\n", path_str(dir.path()))).unwrap();
    let mut cmd = zarrd();
    cmd.arg("check-config").arg(&config);
    let (status, _, stderr) = run(cmd).await;
    assert!(!status.success() && stderr.contains("bin"), "{stderr}");
}

#[tokio::test]
async fn serve_refuses_to_start_on_an_unreachable_mount() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("zarrd.toml");
    let missing = dir.path().join("does/not/exist");
    std::fs::write(&config, format!("[mounts.lost]\nurl = \"{}\"\n", path_str(&missing))).unwrap();
    let (status, _, stderr) = run(serve_cmd(&["--config", path_str(&config)])).await;
    assert!(!status.success(), "serve started on a missing directory");
    assert!(stderr.contains("lost") && stderr.contains("does/not/exist"), "stderr: {stderr}");

    let (status, _, stderr) = run(serve_cmd(&["--mount", "no-equals-sign"])).await;
    assert!(!status.success());
    assert!(stderr.contains("NAME=URL"), "stderr: {stderr}");
}

#[tokio::test]
async fn check_config_accepts_a_valid_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("zarrd.toml");
    std::fs::write(
        &config,
        format!(
            "bind = \"127.0.0.1:0\"\n[limits]\nmax_put_bytes = 1024\n[mounts.data]\nurl = \"{}\"\nread_only = true\n[mounts.scratch]\nurl = \"memory://\"\n",
            path_str(dir.path())
        ),
    )
    .unwrap();
    let mut cmd = zarrd();
    cmd.arg("check-config").arg(&config);
    let (status, stdout, stderr) = run(cmd).await;
    assert!(status.success(), "check-config failed: {stderr}");
    assert!(stdout.contains("ok") && stdout.contains("data") && stdout.contains("scratch"), "stdout: {stdout}");

    // The example configuration shipped with the repository is valid too
    // (its `./data` mount is created in a temporary working directory).
    let mut cmd = zarrd();
    cmd.arg("check-config").arg(concat!(env!("CARGO_MANIFEST_DIR"), "/config/zarrd.example.toml"));
    cmd.current_dir(dir.path());
    let (status, _, stderr) = run(cmd).await;
    assert!(status.success(), "the example configuration is invalid: {stderr}");
}

#[tokio::test]
async fn check_config_names_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir");
    // (configuration text, what stderr must mention)
    let cases: Vec<(String, Vec<&str>)> = vec![
        ("colour = \"blue\"\n".into(), vec!["colour"]),
        ("[mounts.data]\nurl = \"memory://\"\nreadonly = true\n".into(), vec!["readonly"]),
        ("[limits]\nmax_put_byte = 5\n".into(), vec!["max_put_byte"]),
        ("[mounts.archive]\nurl = \"ftp://x\"\n".into(), vec!["archive", "ftp"]),
        (format!("[mounts.lost]\nurl = \"{}\"\n", path_str(&missing)), vec!["lost", "no/such/dir"]),
        (format!("[mounts.lost]\nurl = \"file://{}\"\n", path_str(&missing)), vec!["lost", "no/such/dir"]),
        ("[mounts.s]\nurl = \"s3://bucket/p\"\n[mounts.s.options]\ncolour = \"x\"\n".into(), vec!["s", "colour"]),
        ("[mounts.m]\nurl = \"memory://somewhere\"\n".into(), vec!["m", "memory"]),
        ("[limits]\nmax_put_bytes = 0\n".into(), vec!["limits.max_put_bytes"]),
        ("bind = \"nowhere\"\n".into(), vec!["bind"]),
        ("bind = \n".into(), vec!["zarrd.toml"]),
        ("[mounts.\"bad/name\"]\nurl = \"memory://\"\n".into(), vec!["bad/name"]),
    ];
    let config = dir.path().join("zarrd.toml");
    for (text, needles) in cases {
        std::fs::write(&config, &text).unwrap();
        let mut cmd = zarrd();
        cmd.arg("check-config").arg(&config);
        let (status, _, stderr) = run(cmd).await;
        assert!(!status.success(), "check-config accepted:\n{text}");
        assert!(!stderr.contains("panicked"), "check-config panicked on:\n{text}\n{stderr}");
        for needle in needles {
            assert!(stderr.contains(needle), "stderr for\n{text}should mention `{needle}`: {stderr}");
        }
    }
    let mut cmd = zarrd();
    cmd.arg("check-config").arg(dir.path().join("absent.toml"));
    let (status, _, stderr) = run(cmd).await;
    assert!(!status.success());
    assert!(stderr.contains("absent.toml"), "stderr: {stderr}");
}

#[tokio::test]
async fn help_mentions_the_commands() {
    let mut cmd = zarrd();
    cmd.arg("--help");
    let (status, stdout, _) = run(cmd).await;
    assert!(status.success());
    for word in ["serve", "check-config"] {
        assert!(stdout.contains(word), "--help should mention {word}: {stdout}");
    }
    let mut cmd = zarrd();
    cmd.args(["serve", "--help"]);
    let (status, stdout, _) = run(cmd).await;
    assert!(status.success());
    for word in ["--bind", "--mount", "--config"] {
        assert!(stdout.contains(word), "serve --help should mention {word}: {stdout}");
    }
    let mut cmd = zarrd();
    cmd.arg("--no-such-flag");
    let (status, _, _) = run(cmd).await;
    assert!(!status.success());
}

#[tokio::test]
async fn openapi_command_prints_the_document() {
    let mut cmd = zarrd();
    cmd.arg("openapi");
    let (status, stdout, _) = run(cmd).await;
    assert!(status.success());
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("OpenAPI JSON");
    assert!(doc["paths"].get("/zarr/{mount}/{key}").is_some());
}

#[tokio::test]
async fn hash_token_prints_the_sha256_of_stdin() {
    async fn hash(input: &str) -> (ExitStatus, String, String) {
        let mut cmd = zarrd();
        cmd.arg("hash-token").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn zarrd");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).await.unwrap();
        drop(stdin);
        let out = tokio::time::timeout(EXIT_TIMEOUT, child.wait_with_output()).await.expect("exit").unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
    // `printf 0123456789abcdef | sha256sum`; the trailing newline is not part of the token.
    let expected = "9f9f5111f7b27a781f1f1ddde5ebc2dd2b796bfc7365c9c28b548e564176929f";
    for input in ["0123456789abcdef", "0123456789abcdef\n"] {
        let (status, out, err) = hash(input).await;
        assert!(status.success(), "{err}");
        assert_eq!(out.trim(), expected);
    }
    for bad in ["", "short\n", "has a space in it ok\n"] {
        let (status, out, err) = hash(bad).await;
        assert!(!status.success() && out.is_empty(), "{bad:?} accepted");
        assert!(err.contains("token"), "{err}");
    }
}

#[tokio::test]
async fn tokens_never_appear_in_the_logs() {
    let dir = tempfile::tempdir().unwrap();
    let token = "s3cr3t-t0ken-value-do-not-log-1234";
    let wrong = "wr0ng-t0ken-value-do-not-log-5678";
    let config = dir.path().join("zarrd.toml");
    std::fs::write(
        &config,
        format!(
            "[mounts.data]\nurl = \"memory://\"\n[[auth.tokens]]\nname = \"ci-bot\"\nsha256 = \"{}\"\nscopes = {{ data = [\"write\"] }}\n",
            zarrd::config::TokenHash::of(token.as_bytes()).to_hex()
        ),
    )
    .unwrap();
    let mut cmd = serve_cmd(&["--config", path_str(&config)]);
    // Everything, from every crate.
    cmd.env("RUST_LOG", "trace");
    let server = Server::start(cmd).await;
    let client = common::client();
    let auth = |t: &str| format!("Bearer {t}");
    let r = client.put(server.url("/zarr/data/k")).header("authorization", auth(token)).body("v").send().await.unwrap();
    assert_eq!(r.status(), 201);
    let r = client.get(server.url("/zarr/data/k")).header("authorization", auth(token)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = client.get(server.url("/zarr/data/k")).header("authorization", auth(wrong)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r =
        client.put(server.url("/zarr/data/boom")).header("authorization", auth(wrong)).body("v").send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r =
        client.get(server.url("/zarr/data/k")).header("authorization", format!("Basic {token}")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let stderr = server.stderr.clone();
    server.stop().await;
    let logs = stderr.lock().unwrap().clone();
    // The logs were captured: the token's name and the request lines are there...
    assert!(logs.contains("ci-bot"), "the token name is not logged:\n{logs}");
    assert!(
        logs.lines().any(|l| l.contains("path=\"/zarr/data/k\" status=200") && l.contains("token=\"ci-bot\"")),
        "request lines do not name the token:\n{logs}"
    );
    assert!(logs.matches("/zarr/data/k").count() >= 3, "request lines missing:\n{logs}");
    assert!(logs.contains("401"), "{logs}");
    // ...the token values are not, nor any recognisable part of them.
    for secret in [token, wrong] {
        assert!(!logs.contains(secret), "a token value is in the logs");
        assert!(!logs.contains(&secret[..12]), "part of a token value is in the logs");
    }
}

#[tokio::test]
async fn token_scopes_may_name_mounts_from_the_command_line_but_not_unknown_ones() {
    let dir = tempfile::tempdir().unwrap();
    let hash = zarrd::config::TokenHash::of(b"cli-token-0123456789").to_hex();
    let tokens =
        |mount: &str| format!("[{{ name = \"t\", sha256 = \"{hash}\", scopes = {{ {mount} = [\"write\"] }} }}]");
    let mount = format!("x={}", path_str(dir.path()));
    let mut cmd = serve_cmd(&["--mount", &mount]);
    cmd.env("ZARRD_AUTH__TOKENS", tokens("x"));
    let server = Server::start(cmd).await;
    let client = common::client();
    let url = server.url("/zarr/x/k");
    assert_eq!(client.put(&url).body("v").send().await.unwrap().status(), 401);
    let r = client.put(&url).header("authorization", "Bearer cli-token-0123456789").body("v").send().await.unwrap();
    assert_eq!(r.status(), 201);
    server.stop().await;

    let mut cmd = serve_cmd(&["--mount", &mount]);
    cmd.env("ZARRD_AUTH__TOKENS", tokens("y"));
    let (status, _, err) = run(cmd).await;
    assert!(!status.success());
    assert!(err.contains("auth.tokens[0].scopes.y"), "{err}");
}

/// The container image's configuration starts the binary: the test reads
/// the Dockerfile itself (the configuration file it copies, its `CMD`, its
/// `HEALTHCHECK` path, its build command) and runs what the image runs,
/// with only the bind address moved to loopback and `/data` to a temporary
/// directory (no container engine runs on the test machines).
#[tokio::test]
async fn the_container_image_configuration_starts_the_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).expect("Dockerfile");
    let instruction = |name: &str| -> String {
        dockerfile
            .lines()
            .find_map(|l| l.strip_prefix(name).map(|rest| rest.trim().to_string()))
            .unwrap_or_else(|| panic!("the Dockerfile has no {name}"))
    };
    // The build step is the README's.
    let build = dockerfile.lines().find(|l| l.starts_with("RUN cargo build")).expect("a cargo build step");
    let command = build.trim_start_matches("RUN ").split(" &&").next().unwrap().trim();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    assert!(readme.contains(&format!("`{command}`")), "README does not show the image's build command `{command}`");
    // COPY config/docker.toml /etc/zarrd/zarrd.toml, and CMD [..., "/etc/zarrd/zarrd.toml"].
    let copy = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("COPY config/"))
        .find(|rest| !rest.starts_with("./"))
        .expect("the Dockerfile copies a configuration file");
    let (source, target) = copy.split_once(' ').expect("COPY source target");
    let source = root.join("config").join(source);
    let cmd: Vec<String> = serde_json::from_str(&instruction("CMD")).expect("CMD is an exec-form array");
    let args: Vec<String> = cmd
        .iter()
        .map(|a| if a == target.trim() { source.to_str().expect("UTF-8 path").to_string() } else { a.clone() })
        .collect();
    assert!(args.iter().any(|a| Path::new(a) == source), "CMD does not use {target}: {cmd:?}");
    let health_url = dockerfile
        .lines()
        .skip_while(|l| !l.starts_with("HEALTHCHECK"))
        .find_map(|l| l.split_whitespace().find(|w| w.starts_with("http://127.0.0.1:8080/")).map(str::to_string))
        .expect("a HEALTHCHECK with a URL");
    let health_path = health_url.trim_start_matches("http://127.0.0.1:8080");

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let overrides =
        [("ZARRD_BIND", "127.0.0.1:0".to_string()), ("ZARRD_MOUNTS__DATA__URL", path_str(&data).to_string())];
    let mut check = zarrd();
    check.arg("check-config").arg(&source).envs(overrides.iter().map(|(k, v)| (k, v)));
    let (status, _, stderr) = run(check).await;
    assert!(status.success(), "check-config {}: {stderr}", source.display());

    let mut cmd = zarrd();
    cmd.args(&args).envs(overrides.iter().map(|(k, v)| (k, v)));
    let server = Server::start(cmd).await;
    let client = common::client();
    let r = client.get(server.url(health_path)).send().await.unwrap();
    assert_eq!(r.status(), 200, "the HEALTHCHECK path {health_path}");
    assert!(data.is_dir(), "the /data mount is created (create = true)");
    let r = client.get(server.url("/zarr/data/missing/zarr.json")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    server.stop().await;
}

#[tokio::test]
async fn a_second_server_on_a_port_in_use_fails_at_start_naming_the_address() {
    let dir = tempfile::tempdir().unwrap();
    let mount = format!("data={}", path_str(dir.path()));
    let first = Server::start(serve_cmd(&["--mount", &mount])).await;
    let addr = first.addr.to_string();
    let mut cmd = zarrd();
    cmd.arg("serve").arg("--bind").arg(&addr).arg("--mount").arg(&mount);
    let (status, stdout, stderr) = run(cmd).await;
    assert!(!status.success(), "a second server started on {addr}; stdout:\n{stdout}");
    assert!(!stdout.contains("listening"), "stdout: {stdout}");
    assert!(stderr.contains(&addr) && stderr.contains("already in use"), "stderr: {stderr}");
    assert!(stderr.contains("bind_reuse_port"), "the way to share is named; stderr: {stderr}");
    // The first one serves every request still.
    let client = common::client();
    for _ in 0..20 {
        assert_eq!(client.get(first.url("/healthz")).send().await.unwrap().status(), 200);
    }
    first.stop().await;

    // Sharing the port is possible when both say so.
    let mut cmd = serve_cmd(&["--mount", &mount]);
    cmd.env("ZARRD_BIND_REUSE_PORT", "true");
    let first = Server::start(cmd).await;
    let mut cmd = zarrd();
    cmd.arg("serve").arg("--bind").arg(first.addr.to_string()).arg("--mount").arg(&mount);
    cmd.env("ZARRD_BIND_REUSE_PORT", "true");
    let second = Server::start(cmd).await;
    assert_eq!(second.addr, first.addr);
    second.stop().await;
    first.stop().await;
}
