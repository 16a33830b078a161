//! HTTPS served directly: a self-signed certificate generated here, the
//! server's own connection handling, and a client that trusts only that
//! certificate, over HTTP/1.1 and HTTP/2 (negotiated by ALPN).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use zarrd::config::Tls;
use zarrd::service::App;
use zarrd::storage::{Mount, MountSpec};

fn tls_client(cert_pem: &[u8], addr: SocketAddr, http1: bool) -> reqwest::Client {
    let cert = reqwest::Certificate::from_pem(cert_pem).expect("certificate PEM");
    let builder = reqwest::Client::builder()
        .no_proxy()
        .tls_certs_only([cert])
        .resolve("localhost", addr)
        .timeout(Duration::from_secs(30));
    let builder = if http1 { builder.http1_only() } else { builder };
    builder.build().expect("client")
}

#[tokio::test]
async fn https_over_http1_and_http2_with_a_self_signed_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_pem = generated.cert.pem();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, &cert_pem).unwrap();
    std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();

    let mut config = common::test_config();
    config.tls = Some(Tls { cert, key });
    let mount = Mount::build("data", &MountSpec::from_url("memory://")).unwrap();
    let (addr, _task) = common::serve_app(App::with_mounts(config, vec![mount])).await;
    let url = |path: &str| format!("https://localhost:{}{path}", addr.port());

    for (http1, version) in [(true, reqwest::Version::HTTP_11), (false, reqwest::Version::HTTP_2)] {
        let c = tls_client(cert_pem.as_bytes(), addr, http1);
        let r = c.get(url("/healthz")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.version(), version);
        let v: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
        assert_eq!(v["status"], "ok");
        // The store protocol too, writes included.
        let key = format!("/zarr/data/{version:?}");
        assert_eq!(c.put(url(&key)).body("over tls").send().await.unwrap().status(), 201);
        let r = c.get(url(&key)).header("range", "bytes=5-7").send().await.unwrap();
        assert_eq!((r.status().as_u16(), r.version()), (206, version));
        assert_eq!(r.bytes().await.unwrap().as_ref(), b"tls");
    }

    // Plain HTTP on the TLS port gets no answer; a client that does not trust the certificate fails.
    let plain = common::client().get(format!("http://{addr}/healthz")).send().await;
    assert!(plain.is_err() || plain.is_ok_and(|r| !r.status().is_success()));
    let untrusting = reqwest::Client::builder().no_proxy().resolve("localhost", addr).build().unwrap();
    assert!(untrusting.get(url("/healthz")).send().await.is_err());
}

#[tokio::test]
async fn clients_that_never_finish_the_handshake_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, generated.cert.pem()).unwrap();
    std::fs::write(&key, generated.signing_key.serialize_pem()).unwrap();
    let mut config = common::test_config();
    config.tls = Some(Tls { cert, key });
    config.limits.header_read_timeout_seconds = 1;
    let (addr, _task) = common::serve_app(App::with_mounts(config, Vec::new())).await;
    let started = std::time::Instant::now();
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut partial = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The first bytes of a TLS record header, then nothing.
    partial.write_all(&[0x16, 0x03]).await.unwrap();
    for conn in [&mut silent, &mut partial] {
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0) | Err(_))), "connection not closed: {read:?}");
    }
    assert!(started.elapsed() >= Duration::from_millis(900), "closed early: {:?}", started.elapsed());

    // A finished handshake that chose HTTP/2, then no connection preface.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(generated.cert.der().clone()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(client));
    let started = std::time::Instant::now();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 256];
        // The server's own SETTINGS may come first; then the end.
        for _ in 0..100 {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
        false
    })
    .await;
    assert_eq!(closed, Ok(true), "an HTTP/2 connection without a preface was not closed");
    assert!(started.elapsed() >= Duration::from_millis(900), "closed early: {:?}", started.elapsed());
}

#[tokio::test]
async fn unreadable_certificates_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = common::test_config();
    config.tls = Some(Tls { cert: dir.path().join("missing.pem"), key: dir.path().join("key.pem") });
    let e = zarrd::server::Connections::new(&config).unwrap_err().to_string();
    assert!(e.contains("tls.cert") && e.contains("missing.pem"), "{e}");
    let cert = dir.path().join("empty.pem");
    std::fs::write(&cert, "not a certificate").unwrap();
    config.tls = Some(Tls { cert, key: dir.path().join("key.pem") });
    let e = zarrd::server::Connections::new(&config).unwrap_err().to_string();
    assert!(e.contains("tls.cert") && e.contains("no PEM certificate"), "{e}");
}
