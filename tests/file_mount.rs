//! File mounts: nothing outside the mount's root is ever read, written or
//! deleted, however the path is spelled; and what only a directory tree can
//! get wrong (keys that collide with directories, files changed behind
//! zarrd's back, where written bytes land on disk).
//!
//! The attacks are sent raw (the request target byte for byte), because
//! reqwest and `url` would normalise `..`, `%2e%2e` and backslashes away
//! before the server saw them.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{raw_request, serve_app, test_config, Reply};
use zarrd::service::App;
use zarrd::storage::{Mount, MountSpec};

const SECRET: &[u8] = b"TOP-SECRET-next-to-the-mount";
const SIBLING_SECRET: &[u8] = b"SIBLING-SECRET-in-root-sibling";

/// `parent/` holds the mount root `root/`, a secret file beside it, and a
/// sibling directory whose name starts with the root's name.
struct Layout {
    _dir: tempfile::TempDir,
    parent: PathBuf,
    root: PathBuf,
    addr: std::net::SocketAddr,
}

async fn layout() -> Layout {
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path().canonicalize().unwrap();
    let root = parent.join("root");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/inner.bin"), b"inner").unwrap();
    std::fs::write(parent.join("secret.txt"), SECRET).unwrap();
    std::fs::create_dir(parent.join("root-sibling")).unwrap();
    std::fs::write(parent.join("root-sibling/secret.txt"), SIBLING_SECRET).unwrap();
    let mount = Mount::build("data", &MountSpec::from_url(&format!("file://{}", root.display()))).unwrap();
    let (addr, _task) = serve_app(App::with_mounts(test_config(), vec![mount])).await;
    Layout { _dir: dir, parent, root, addr }
}

/// Every file outside the mount root, with its bytes.
fn outside_files(parent: &Path, root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![parent.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path == root {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// What an attack may be answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// The decoded key is unsafe: 400.
    BadRequest,
    /// The path lands in the mount-name position: an unknown mount (404), or 400.
    NoSuchMount,
    /// The decoded key is a legitimate (odd) name inside the mount: any
    /// answer, as long as it stays inside the root.
    Contained,
}

fn attacks(l: &Layout) -> Vec<(String, Expect)> {
    use Expect::{BadRequest, Contained, NoSuchMount};
    let abs = l.parent.join("secret.txt").display().to_string();
    let abs_encoded = abs.replace('/', "%2f");
    let in_mount = [
        ("../secret.txt", BadRequest),
        ("..", BadRequest),
        ("../", BadRequest),
        ("..%2fsecret.txt", BadRequest),
        ("..%2Fsecret.txt", BadRequest),
        ("%2e%2e/secret.txt", BadRequest),
        ("%2E%2E/secret.txt", BadRequest),
        ("%2e%2E%2fsecret.txt", BadRequest),
        ("%2e%2e%2f", BadRequest),
        (".%2e/secret.txt", BadRequest),
        ("%2e./secret.txt", BadRequest),
        ("sub/../../secret.txt", BadRequest),
        ("sub/%2e%2e/%2e%2e/secret.txt", BadRequest),
        ("sub%2f..%2f..%2fsecret.txt", BadRequest),
        ("%2f..%2fsecret.txt", BadRequest),
        ("..\\secret.txt", BadRequest),
        ("..%5csecret.txt", BadRequest),
        ("..%5Csecret.txt", BadRequest),
        ("%2e%2e%5csecret.txt", BadRequest),
        ("sub\\..\\..\\secret.txt", BadRequest),
        ("sub%5c..%5c..%5csecret.txt", BadRequest),
        ("..%00/secret.txt", BadRequest),
        ("secret.txt%00", BadRequest),
        ("../secret.txt%00.png", BadRequest),
        ("sub//../../secret.txt", BadRequest),
        ("sub/a//b", BadRequest),
        ("./../secret.txt", BadRequest),
        ("./sub/inner.bin", BadRequest),
        ("sub/./inner.bin", BadRequest),
        ("%2e/%2e%2e/secret.txt", BadRequest),
        ("../root-sibling/secret.txt", BadRequest),
        ("%2e%2e/root-sibling/secret.txt", BadRequest),
        ("..%2froot-sibling%2fsecret.txt", BadRequest),
        ("%c0%ae%c0%ae/secret.txt", BadRequest),
        // Double encoding and look-alikes decode once, to literal names inside the mount.
        ("%252e%252e/secret.txt", Contained),
        ("..%252fsecret.txt", Contained),
        ("%252e%252e%252fsecret.txt", Contained),
        ("..%255csecret.txt", Contained),
        ("..;/secret.txt", Contained),
        ("...", Contained),
        ("%EF%BC%8E%EF%BC%8E/secret.txt", Contained),
        ("%uff0e%uff0e/secret.txt", Contained),
    ];
    let mut out: Vec<(String, Expect)> =
        in_mount.iter().map(|(suffix, expect)| (format!("/zarr/data/{suffix}"), *expect)).collect();
    out.extend([
        // Absolute paths.
        (format!("/zarr/data/{abs}"), BadRequest),
        (format!("/zarr/data/{abs_encoded}"), BadRequest),
        (format!("/zarr/data/{}", abs.trim_start_matches('/')), Contained),
        // The mount segment.
        ("/zarr/../secret.txt".to_string(), NoSuchMount),
        ("/zarr/%2e%2e/secret.txt".to_string(), NoSuchMount),
        ("/zarr/data%2f..%2fsecret.txt".to_string(), NoSuchMount),
        ("/zarr/data%2f..%2f..%2fsecret.txt/".to_string(), NoSuchMount),
        ("/zarr/..%2fsecret.txt".to_string(), NoSuchMount),
        // Absolute-form request target (RFC 9112 §3.2.2).
        (format!("http://{}/zarr/data/../secret.txt", l.addr), BadRequest),
        (format!("http://{}/zarr/data/%2e%2e/secret.txt", l.addr), BadRequest),
    ]);
    out
}

#[track_caller]
fn check(target: &str, method: &str, expect: Expect, r: &Reply) {
    let leaked = |needle: &[u8]| r.body.windows(needle.len()).any(|w| w == needle);
    assert!(!leaked(SECRET) && !leaked(SIBLING_SECRET), "{method} {target} served a secret: {r}");
    match expect {
        Expect::BadRequest => assert_eq!(r.status, 400, "{method} {target}: {r}"),
        // A redirect (to the same path plus `/`) is safe too; whether an
        // unknown mount should be redirected at all is checked elsewhere.
        Expect::NoSuchMount => assert!(matches!(r.status, 301 | 400 | 404), "{method} {target}: {r}"),
        Expect::Contained => assert!(r.status < 500, "{method} {target}: {r}"),
    }
    if expect == Expect::BadRequest && method != "HEAD" && !r.body.is_empty() {
        r.expect_error(400, "invalid_key");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_outside_the_root_is_read_written_or_deleted() {
    let l = layout().await;
    let before = outside_files(&l.parent, &l.root);
    assert_eq!(before.len(), 2);
    for (target, expect) in attacks(&l) {
        for method in ["GET", "HEAD", "PUT", "DELETE", "PROPFIND", "MKCOL"] {
            let headers: &[(&str, &str)] = match method {
                "PROPFIND" => &[("Depth", "infinity")],
                "GET" => &[("Range", "bytes=0-")],
                _ => &[],
            };
            let body: &[u8] = if method == "PUT" { b"PWNED" } else { b"" };
            let r = raw_request(l.addr, method, &target, headers, body).await;
            check(&target, method, expect, &r);
            if method == "GET" {
                // And without a range.
                let r = raw_request(l.addr, method, &target, &[], b"").await;
                check(&target, "GET (no range)", expect, &r);
            }
        }
        assert_eq!(outside_files(&l.parent, &l.root), before, "after {target}: files outside the root changed");
    }
    // The root's own files are intact, and listings do not reveal where the root is.
    assert_eq!(std::fs::read(l.root.join("sub/inner.bin")).unwrap(), b"inner");
    let r = raw_request(l.addr, "PROPFIND", "/zarr/data/", &[("Depth", "infinity")], b"").await;
    assert_eq!(r.status, 207);
    assert!(!r.text().contains(&l.parent.display().to_string()), "PROPFIND leaks the server path: {r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_land_under_the_root_byte_for_byte() {
    let l = layout().await;
    let body: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    let r = raw_request(l.addr, "PUT", "/zarr/data/arr/c/0/1", &[], &body).await;
    r.expect_status(201);
    assert_eq!(std::fs::read(l.root.join("arr/c/0/1")).unwrap(), body);
    let r = raw_request(l.addr, "PUT", "/zarr/data/sp%20ace/%C3%A9", &[], b"e").await;
    r.expect_status(201);
    assert_eq!(std::fs::read(l.root.join("sp ace/é")).unwrap(), b"e");
    // Deleting the only file of a directory does not delete anything above the root.
    raw_request(l.addr, "DELETE", "/zarr/data/arr/c/0/1", &[], b"").await.expect_status(204);
    assert!(!l.root.join("arr/c/0/1").exists());
    assert!(l.root.is_dir(), "the mount root itself must survive clean-up");
    raw_request(l.addr, "DELETE", "/zarr/data/sub/inner.bin", &[], b"").await.expect_status(204);
    assert!(l.root.is_dir(), "the mount root itself must survive clean-up");
    raw_request(l.addr, "GET", "/zarr/data/", &[], b"").await.expect_status(200);
    assert_eq!(std::fs::read(l.parent.join("secret.txt")).unwrap(), SECRET);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn files_changed_behind_zarrds_back_are_served_with_new_etags() {
    let l = layout().await;
    std::fs::write(l.root.join("ext.bin"), b"version one").unwrap();
    let r = raw_request(l.addr, "GET", "/zarr/data/ext.bin", &[], b"").await;
    r.expect_status(200);
    assert_eq!(r.body, b"version one");
    let e1 = r.must_header("etag").to_string();
    // Replaced the way most tools do it (write elsewhere, rename over), same length.
    std::fs::write(l.root.join("ext.tmp"), b"version two").unwrap();
    std::fs::rename(l.root.join("ext.tmp"), l.root.join("ext.bin")).unwrap();
    let r = raw_request(l.addr, "GET", "/zarr/data/ext.bin", &[("If-None-Match", &e1)], b"").await;
    assert_eq!(r.status, 200, "a stale ETag must not answer 304: {r}");
    assert_eq!(r.body, b"version two");
    assert_ne!(r.must_header("etag"), e1);
    // A PUT conditioned on the stale ETag fails.
    let r = raw_request(l.addr, "PUT", "/zarr/data/ext.bin", &[("If-Match", &e1)], b"version three").await;
    r.expect_error(412, "precondition_failed");
    assert_eq!(std::fs::read(l.root.join("ext.bin")).unwrap(), b"version two");
    // Rewritten in place with its modification time put back (`rsync
    // --inplace -t`, `tar -x`): the change time still tells it apart.
    let file = std::fs::OpenOptions::new().write(true).open(l.root.join("ext.bin")).unwrap();
    let mtime = file.metadata().unwrap().modified().unwrap();
    let e2 = raw_request(l.addr, "GET", "/zarr/data/ext.bin", &[], b"").await.must_header("etag").to_string();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::os::unix::fs::FileExt::write_all_at(&file, b"VERSION", 0).unwrap();
    file.set_modified(mtime).unwrap();
    drop(file);
    assert_eq!(std::fs::metadata(l.root.join("ext.bin")).unwrap().modified().unwrap(), mtime);
    let r = raw_request(l.addr, "GET", "/zarr/data/ext.bin", &[("If-None-Match", &e2)], b"").await;
    assert_eq!(r.status, 200, "content rewritten under the same mtime must not answer 304: {r}");
    assert_eq!(r.body, b"VERSION two");
    let e3 = r.must_header("etag").to_string();
    assert_ne!(e3, e2);
    let r = raw_request(l.addr, "PUT", "/zarr/data/ext.bin", &[("If-Match", &e2)], b"version four").await;
    r.expect_error(412, "precondition_failed");
    // zarrd's own writes of the same length, back to back: each a new ETag.
    let mut seen = std::collections::HashSet::from([e3]);
    for i in 0..20 {
        let r = raw_request(l.addr, "PUT", "/zarr/data/ext.bin", &[], format!("version {i:04}").as_bytes()).await;
        r.expect_status(204);
        assert!(seen.insert(r.must_header("etag").to_string()), "write {i} repeated an ETag: {r}");
    }
    // Removed behind zarrd's back: 404.
    std::fs::remove_file(l.root.join("ext.bin")).unwrap();
    raw_request(l.addr, "GET", "/zarr/data/ext.bin", &[("Range", "bytes=-16")], b"").await.expect_status(404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keys_that_collide_with_directories_are_client_errors() {
    // On a directory tree a key cannot be both an object and a prefix. That
    // is the client's conflict (409), not a storage outage (503 + Retry-After).
    let l = layout().await;
    raw_request(l.addr, "PUT", "/zarr/data/obj", &[], b"x").await.expect_status(201);
    let r = raw_request(l.addr, "PUT", "/zarr/data/obj/child", &[], b"y").await;
    assert_eq!(r.status, 409, "PUT below an existing object: {r}");
    let r = raw_request(l.addr, "PUT", "/zarr/data/sub", &[], b"y").await;
    assert_eq!(r.status, 409, "PUT onto an existing directory: {r}");
    assert_eq!(std::fs::read(l.root.join("sub/inner.bin")).unwrap(), b"inner");
    assert_eq!(std::fs::read(l.root.join("obj")).unwrap(), b"x");
    // Reads: below an object is a missing key; a directory redirects to its listing.
    raw_request(l.addr, "GET", "/zarr/data/obj/child", &[], b"").await.expect_status(404);
    let r = raw_request(l.addr, "GET", "/zarr/data/sub", &[("Range", "bytes=-16")], b"").await;
    r.expect_status(301);
    assert_eq!(r.must_header("location"), "/zarr/data/sub/");
    raw_request(l.addr, "DELETE", "/zarr/data/sub", &[], b"").await;
    assert_eq!(std::fs::read(l.root.join("sub/inner.bin")).unwrap(), b"inner", "DELETE of a directory key");
}
