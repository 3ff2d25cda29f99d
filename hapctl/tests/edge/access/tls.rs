//! The API over TLS (`[api] tls_cert`, `tls_key`, `client_ca`): real handshakes with rustls
//! and with curl (OpenSSL), plain HTTP refused on the TLS port, a renewed certificate served
//! without a restart, client certificates required with `client_ca`, and a key that does not
//! go with its certificate refused at start.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ClientConfig;

use hapctl::tls::probe;
use hapctl::tls::x509::CertInfo;
use testkit::daemon::{http_call, https_request, ApiResponse, Daemon};
use testkit::pki::{Leaf, TestCa};
use testkit::{free_port, Edge};

const NAME: &str = "localhost";

/// A client trusting `ca`, presenting `cert` (with the intermediate) when given.
fn client(ca: &TestCa, cert: Option<&Leaf>) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(ca.roots());
    let config = match cert {
        Some(leaf) => {
            let pem = format!("{}{}", leaf.cert_pem, ca.intermediate_pem);
            let chain = CertificateDer::pem_slice_iter(pem.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

/// The server's files in the state dir and `[api]` naming them (`client_ca`: the CA's root).
fn configure(edge: &Edge, ca: &TestCa, server: &Leaf, client_ca: bool) {
    let chain = format!("{}{}", server.cert_pem, ca.intermediate_pem);
    std::fs::write(edge.path("api.pem"), chain).unwrap();
    hapctl::fsutil::write_secret(&edge.path("api.key"), server.key_pem.as_bytes()).unwrap();
    std::fs::write(edge.path("clients.pem"), ca.root_pem()).unwrap();
    let mut keys = vec![
        ("tls_cert", "api.pem".to_string()),
        ("tls_key", "api.key".to_string()),
    ];
    if client_ca {
        keys.push(("client_ca", "clients.pem".to_string()));
    }
    edge.set_setting_keys("api", &keys);
}

/// `hapctl serve` over TLS, once it answers `GET /v1/health` to `config`.
fn serve(edge: &Edge, config: &Arc<ClientConfig>) -> Daemon {
    let port = free_port();
    let api = Daemon::spawn(edge, port, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match get(&api, config, "/v1/health", false) {
            Ok(r) if r.status == 200 => return api,
            other => assert!(
                Instant::now() < deadline,
                "the API never answered over TLS: {other:?}\n{}",
                api.log_text()
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn get(
    api: &Daemon,
    config: &Arc<ClientConfig>,
    path: &str,
    token: bool,
) -> Result<ApiResponse, String> {
    let bearer = format!("Bearer {}", api.token);
    let headers: Vec<(&str, &str)> = if token {
        vec![("Authorization", bearer.as_str())]
    } else {
        vec![]
    };
    https_request(api.port, config.clone(), NAME, "GET", path, &headers)
}

/// `curl` (OpenSSL) to the API, trusting the CA's root; `extra` are more arguments.
fn curl(edge: &Edge, api: &Daemon, path: &str, extra: &[&str]) -> std::process::Output {
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "10", "--cacert"])
        .arg(edge.path("clients.pem"))
        .arg("--resolve")
        .arg(format!("{NAME}:{}:127.0.0.1", api.port))
        .args(["-H", &format!("Authorization: Bearer {}", api.token)])
        .args(extra)
        .arg(format!("https://{NAME}:{}{path}", api.port));
    testkit::run_bounded(c, Duration::from_secs(20))
}

#[test]
fn the_api_answers_over_tls_to_rustls_and_curl_and_never_in_plain_http() {
    let edge = Edge::started();
    let ca = TestCa::new("api");
    configure(&edge, &ca, &ca.leaf(&[NAME]), false);
    let config = client(&ca, None);
    let api = serve(&edge, &config);
    assert!(api.log_text().contains("https://"), "{}", api.log_text());
    let r = get(&api, &config, "/v1/status", true).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    // TLS does not replace the token.
    assert_eq!(get(&api, &config, "/v1/status", false).unwrap().status, 401);
    // The refusal is recorded with the peer's address, as over plain TCP.
    let audit = get(&api, &config, "/v1/audit?who=(unknown)", true).unwrap();
    let peer = audit.json["records"][0]["peer"]
        .as_str()
        .unwrap_or_default();
    assert!(peer.starts_with("127.0.0.1:"), "{audit:?}");
    let out = curl(
        &edge,
        &api,
        "/v1/status",
        &["-o", "/dev/null", "-w", "%{http_code} %{ssl_verify_result}"],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "200 0",
        "{}",
        testkit::describe(&out)
    );
    // A client that does not trust the CA is refused in the handshake.
    let stranger = client(&TestCa::new("other"), None);
    assert!(get(&api, &stranger, "/v1/health", false).is_err());
    // Plain HTTP on the TLS port gets no HTTP answer.
    let plain = http_call(api.port, "GET", "/v1/health", None, None, None);
    assert!(
        plain.is_err() || plain.as_ref().unwrap().status != 200,
        "{plain:?}"
    );

    // Renewed in place, as hapctl renews the certificates it manages (chain and key in one
    // file, which both settings may name): the next handshake gets the new one.
    let renewed = ca.leaf(&[NAME]);
    let bundle = ca.bundle(&renewed);
    hapctl::fsutil::write_secret(&edge.path("api.key"), bundle.as_bytes()).unwrap();
    std::fs::write(edge.path("api.pem"), bundle).unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], api.port));
    let served =
        probe::verified_handshake(addr, NAME, ca.roots(), Duration::from_secs(10)).unwrap();
    let serial = CertInfo::from_der(&served.chain[0]).unwrap().serial;
    let plain_hex = |s: &str| s.replace(':', "").to_ascii_uppercase();
    assert_eq!(plain_hex(&serial), plain_hex(&renewed.serial));
    assert_eq!(get(&api, &config, "/v1/status", true).unwrap().status, 200);
}

#[test]
fn with_client_ca_a_client_without_its_certificate_is_refused() {
    let edge = Edge::started();
    let ca = TestCa::new("mtls");
    configure(&edge, &ca, &ca.leaf(&[NAME]), true);
    let automation = ca.client_leaf("automation");
    let with_cert = client(&ca, Some(&automation));
    let api = serve(&edge, &with_cert);
    let r = get(&api, &with_cert, "/v1/status", true).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    let without = client(&ca, None);
    let refused = get(&api, &without, "/v1/status", true);
    assert!(refused.is_err(), "no client certificate: {refused:?}");
    let out = curl(&edge, &api, "/v1/status", &[]);
    assert!(
        !out.status.success(),
        "curl without a certificate: {}",
        testkit::describe(&out)
    );
    // With one, curl gets in too.
    let chain = format!("{}{}", automation.cert_pem, ca.intermediate_pem);
    std::fs::write(edge.path("client.pem"), chain).unwrap();
    hapctl::fsutil::write_secret(&edge.path("client.key"), automation.key_pem.as_bytes()).unwrap();
    let cert = edge.path("client.pem").display().to_string();
    let key = edge.path("client.key").display().to_string();
    let out = curl(
        &edge,
        &api,
        "/v1/status",
        &[
            "--cert",
            &cert,
            "--key",
            &key,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "200",
        "{}",
        testkit::describe(&out)
    );
}

#[test]
fn a_key_that_does_not_go_with_its_certificate_is_refused_at_start() {
    let edge = Edge::started();
    let ca = TestCa::new("mismatch");
    let server = ca.leaf(&[NAME]);
    let other = ca.leaf(&[NAME]);
    configure(
        &edge,
        &ca,
        &Leaf {
            key_pem: other.key_pem.clone(),
            ..server
        },
        false,
    );
    let out = edge.run(&["serve", "--listen", &format!("127.0.0.1:{}", free_port())]);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("[api] tls_key") && text.contains("tls_cert"),
        "{text}"
    );
    std::fs::write(edge.path("api.pem"), "not a certificate").unwrap();
    let out = edge.run(&["serve", "--listen", &format!("127.0.0.1:{}", free_port())]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("[api] tls_cert"), "{text}");
}

/// `[api] certificate`: a certificate hapctl manages serves the API, and its replacement
/// (an import, as a renewal installs one) is served at the next handshake, without a restart.
#[test]
fn a_certificate_hapctl_manages_serves_the_api_and_its_replacement_too() {
    let edge = Edge::started();
    let ca = TestCa::new("managed");
    let import = |leaf: &Leaf| {
        let bundle = edge.path("bundle.pem");
        std::fs::write(&bundle, ca.bundle(leaf)).unwrap();
        edge.ok(&["cert", "import", NAME, "--pem", bundle.to_str().unwrap()]);
    };
    let first = ca.leaf(&[NAME]);
    import(&first);
    edge.set_setting_keys("api", &[("certificate", NAME.to_string())]);
    std::fs::write(edge.path("clients.pem"), ca.root_pem()).unwrap();
    let config = client(&ca, None);
    let api = serve(&edge, &config);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], api.port));
    let served_serial = || {
        let served =
            probe::verified_handshake(addr, NAME, ca.roots(), Duration::from_secs(10)).unwrap();
        CertInfo::from_der(&served.chain[0]).unwrap().serial
    };
    let plain_hex = |s: &str| s.replace(':', "").to_ascii_uppercase();
    assert_eq!(plain_hex(&served_serial()), plain_hex(&first.serial));
    assert_eq!(get(&api, &config, "/v1/status", true).unwrap().status, 200);

    let second = ca.leaf(&[NAME]);
    import(&second);
    assert_eq!(plain_hex(&served_serial()), plain_hex(&second.serial));
    let out = curl(
        &edge,
        &api,
        "/v1/status",
        &["-o", "/dev/null", "-w", "%{http_code}"],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "200",
        "{}",
        testkit::describe(&out)
    );
}
