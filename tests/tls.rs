//! `tls://` between framewire peers: mutual certificates as Dask uses them,
//! the Dask handshake and whole messages on top, and every refusal the
//! issue names, each one line and within the handshake deadline. (Against
//! a real Python TLS cluster: `tests/tls_python.rs` and the CLI tests.)

#[path = "support/certs.rs"]
mod certs;
#[path = "support/tls.rs"]
mod tls_support;

use tls_support::{builder, config, node_config, rt};

use std::sync::Arc;
use std::time::{Duration, Instant};

use framewire::transport::{
    Address, ConnectionBuilder, HandshakeOptions, Socket, TimeoutPhase, TlsConfig, TransportError,
};
use framewire::{ErrorKind, Value};
use tokio::net::TcpListener;

fn certs(tag: &str) -> certs::Certs {
    certs::scratch(&format!("tls-{tag}"))
}

/// A refusal or a timeout came within `limit` of `started` (far beyond the
/// deadlines the tests give, 0.3–5 s: this catches a hang, not a slow
/// machine).
fn assert_within(started: Instant, limit: Duration, what: &str) {
    let took = started.elapsed();
    assert!(took < limit, "{what}: took {took:?}");
}

fn opts(secs: f64) -> HandshakeOptions {
    {
        let mut o = HandshakeOptions::default();
        o.timeout = Some(Duration::from_secs_f64(secs));
        o
    }
}

/// A framewire server on 127.0.0.1 that accepts one connection (TLS when
/// `tls` is given), echoes whole messages, and reports how it ended.
async fn echo_server(
    tls: Option<TlsConfig>,
) -> (String, tokio::task::JoinHandle<Result<(), String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let (mut conn, _) = builder(tls.as_ref())
            .accept(stream, &opts(5.0))
            .await
            .map_err(|e| e.to_string())?;
        while let Some(msg) = conn.recv_value().await {
            let msg = msg.map_err(|e| e.to_string())?;
            conn.send_value(&msg).await.map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    (addr, task)
}

#[test]
fn mutual_tls_carries_the_dask_handshake_and_whole_messages() {
    let c = certs("ok");
    let tls = node_config(&c);
    rt().block_on(async {
        let (addr, server) = echo_server(Some(tls.clone())).await;
        let (mut conn, agreed) = builder(Some(&tls))
            .connect(&format!("tls://{addr}"), &opts(5.0))
            .await
            .unwrap();
        assert_eq!(agreed.pickle_protocol(), 5);
        let Socket::TlsClient(_) = conn.get_ref() else {
            panic!("not TLS")
        };
        let suite = conn.get_ref().cipher_suite().expect("a cipher suite");
        assert!(suite.starts_with("TLS13_"), "{suite}");
        let payload = Value::bin(vec![7u8; 1 << 20]);
        let msg = Value::map_of([
            ("op", Value::str("echo")),
            ("data", Value::ToSerialize(Box::new(payload.clone()))),
        ]);
        conn.send_value(&msg).await.unwrap();
        let back = conn.recv_value().await.unwrap().unwrap();
        assert!(back.get("data") == Some(&payload), "the payload comes back");
        drop(conn);
        server.await.unwrap().unwrap();
    });
}

/// A client whose certificate another CA signed, or that presents none, or
/// an expired one, is refused by the server; a server whose certificate
/// another CA signed is refused by the client. Each side says why, in one
/// line, within the deadline.
#[test]
fn refused_certificates_say_why_in_one_line() {
    let c = certs("refused");
    let good = node_config(&c);
    let stranger = config(&c.ca(), &c.other_cert(), &c.other_key());
    let expired = config(&c.ca(), &c.expired_cert(), &c.expired_key());
    let trusts_other = config(&c.other_ca(), &c.other_cert(), &c.other_key());
    rt().block_on(async {
        // (client config, what the server says, what the client says)
        let cases: [(&str, TlsConfig, &str, &str); 3] = [
            ("unknown client CA", stranger, "UnknownIssuer", ""),
            ("expired client", expired, "certificate expired", ""),
            ("server from another CA", trusts_other, "", "UnknownIssuer"),
        ];
        for (name, client, server_says, client_says) in cases {
            let (addr, server) = echo_server(Some(good.clone())).await;
            let started = Instant::now();
            let r = builder(Some(&client))
                .connect(&format!("tls://{addr}"), &opts(5.0))
                .await;
            let server_err = server.await.unwrap().unwrap_err();
            assert_within(started, Duration::from_secs(5), name);
            assert!(
                server_err.contains(server_says),
                "{name}: server: {server_err}"
            );
            assert_eq!(server_err.lines().count(), 1, "{name}: {server_err}");
            match r {
                Ok(_) if client_says.is_empty() => {
                    // TLS 1.3: the client finishes before the server refuses
                    // its certificate; its first read then fails.
                }
                Ok(_) => panic!("{name}: accepted"),
                Err(e) => {
                    let text = e.to_string();
                    assert!(text.contains(client_says), "{name}: client: {text}");
                    assert_eq!(text.lines().count(), 1, "{name}: {text}");
                }
            }
        }
    });
}

#[test]
fn a_client_without_a_certificate_is_refused() {
    let c = certs("anon");
    let good = node_config(&c);
    rt().block_on(async {
        let (addr, server) = echo_server(Some(good.clone())).await;
        // A rustls client that trusts the CA but presents no certificate.
        let no_cert = tokio_rustls::rustls::ClientConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates({
            let mut roots = tokio_rustls::rustls::RootCertStore::empty();
            for cert in rustls_pki_types::pem::PemObject::pem_file_iter(c.ca()).unwrap() {
                roots.add(cert.unwrap()).unwrap();
            }
            roots
        })
        .with_no_client_auth();
        let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
        let _ = tokio_rustls::TlsConnector::from(Arc::new(no_cert))
            .connect(name, stream)
            .await;
        let err = server.await.unwrap().unwrap_err();
        assert!(err.contains("peer sent no certificates"), "{err}");
    });
}

#[test]
fn plaintext_to_a_tls_port_and_tls_to_a_plaintext_port_fail_fast() {
    let c = certs("mixed");
    let good = node_config(&c);
    rt().block_on(async {
        // A Dask handshake in plaintext, to a TLS server.
        let (addr, server) = echo_server(Some(good.clone())).await;
        let started = Instant::now();
        let r = builder(None)
            .connect(&format!("tcp://{addr}"), &opts(3.0))
            .await;
        let server_err = server.await.unwrap().unwrap_err();
        assert!(server_err.contains("TLS handshake failed"), "{server_err}");
        assert!(r.is_err(), "the plaintext client got a connection");
        assert_within(started, Duration::from_secs(3), "plaintext to a TLS server");

        // A TLS ClientHello, to a plaintext server: it is not a Dask
        // prelude the server accepts, so it closes, and the client says so.
        let (addr, server) = echo_server(None).await;
        let started = Instant::now();
        let err = builder(Some(&good))
            .connect(&format!("tls://{addr}"), &opts(3.0))
            .await
            .expect_err("refused");
        let text = err.to_string();
        assert!(text.contains("TLS handshake failed"), "{text}");
        assert_eq!(text.lines().count(), 1);
        assert_within(started, Duration::from_secs(3), "TLS to a plaintext server");
        assert!(
            server.await.unwrap().is_err(),
            "the plaintext server refused the bytes"
        );
    });
}

#[test]
fn a_stalled_tls_handshake_times_out() {
    let c = certs("stall");
    let good = node_config(&c);
    rt().block_on(async {
        // Accepts TCP and never answers.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _hold = tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(s);
        });
        let started = Instant::now();
        // The TLS handshake is part of connecting: it has the connect
        // timeout (attempts cut at a fifth of it, then retried), not the
        // Dask handshake's.
        let err = builder(Some(&good))
            .connect_timeout(Some(Duration::from_millis(500)))
            .connect(&format!("tls://{addr}"), &opts(30.0))
            .await
            .expect_err("a timeout");
        match &err {
            TransportError::Connect(e) => assert_eq!(
                e.last_error().to_string(),
                "the last attempt timed out in the TLS handshake"
            ),
            other => panic!("expected a Connect error, got {other:?}"),
        }
        assert_within(
            started,
            Duration::from_secs(3),
            "a server that never answers",
        );

        // And a server whose client never starts the TLS handshake.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        let started = Instant::now();
        let err = builder(Some(&good))
            .accept(stream, &opts(0.5))
            .await
            .expect_err("a timeout");
        assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
        assert_within(
            started,
            Duration::from_secs(3),
            "a client that never starts TLS",
        );
    });
}

/// `ConnectionBuilder::connect_socket` / `accept_socket` (a relay's ways
/// in): the step under way when the deadline passed, and TLS sockets tell
/// they are.
#[test]
fn socket_deadlines_name_the_step() {
    let c = certs("within");
    let good = node_config(&c);
    let mut quick = ConnectionBuilder::new();
    quick
        .tls(good.clone())
        .connect_timeout(Some(Duration::from_millis(300)));
    let mut plain = ConnectionBuilder::new();
    plain.connect_timeout(Some(Duration::from_secs(10)));
    let mut tls = plain.clone();
    tls.tls(good.clone());
    rt().block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tls_addr = Address::parse(&format!("tls://{addr}")).unwrap();

        // A server that never starts its side of the TLS handshake: the
        // attempts time out in it, and the error says so.
        let started = Instant::now();
        let (err, _accepted) = tokio::join!(quick.connect_socket(&tls_addr), listener.accept());
        let err = err.expect_err("a timeout");
        assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
        assert!(
            err.to_string()
                .contains("the last attempt timed out in the TLS handshake"),
            "{err}"
        );
        assert_within(
            started,
            Duration::from_secs(3),
            "connect_socket, the TLS handshake",
        );

        // A client that never starts it (on a listener of its own: the
        // attempts above left connections in the first one's backlog).
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tls_addr = Address::parse(&format!("tls://{addr}")).unwrap();
        let tcp_addr = Address::parse(&format!("tcp://{addr}")).unwrap();
        let _idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        let err = quick
            .accept_socket(stream, Some(Duration::from_millis(300)))
            .await
            .expect_err("a timeout");
        assert!(
            matches!(
                err,
                TransportError::Timeout {
                    phase: TimeoutPhase::TlsHandshake
                }
            ),
            "{err}"
        );
        assert_eq!(err.to_string(), "timed out in the TLS handshake");

        // Both sides in time: TLS sockets; plain TCP is not.
        for (address, builder) in [(&tls_addr, &tls), (&tcp_addr, &plain)] {
            let accept = async {
                let (s, _) = listener.accept().await.unwrap();
                builder
                    .accept_socket(s, Some(Duration::from_secs(10)))
                    .await
            };
            let (server, client) = tokio::join!(accept, builder.connect_socket(address));
            let (server, client) = (server.unwrap(), client.unwrap());
            assert_eq!(server.is_tls(), address.is_tls());
            assert_eq!(client.is_tls(), address.is_tls());
        }
    });
}

#[test]
fn configuration_errors_name_the_file() {
    let c = certs("files");
    let missing = c.path("nope.pem");
    let err = TlsConfig::from_pem_files(&missing, &c.cert(), Some(&c.key())).unwrap_err();
    assert!(err.to_string().contains("nope.pem"), "{err}");
    let err = TlsConfig::from_pem_files(&c.ca(), &c.key(), Some(&c.key())).unwrap_err();
    assert!(err.to_string().contains("no PEM certificate"), "{err}");
    // A certificate file that holds the key too (Dask allows it).
    let both = c.path("both.pem");
    std::fs::write(&both, [c.read("node.pem"), c.read("node.key")].concat()).unwrap();
    TlsConfig::from_pem_files(&c.ca(), &both, None).unwrap();
    // A tls:// address needs a configuration.
    rt().block_on(async {
        let err = builder(None)
            .connect("tls://127.0.0.1:1", &opts(1.0))
            .await
            .err()
            .unwrap();
        assert!(err.to_string().contains("needs certificates"), "{err}");
    });
}
