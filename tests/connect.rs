//! Connecting as Dask's `connect()` does (`distributed/comm/core.py`):
//! attempts until the connect timeout with jittered exponential backoff, an
//! error at the deadline that names the address, the time and the last
//! cause, a late server found, and a TLS refusal final at once. Over
//! loopback; a connect that hangs (a partition) is in tests/netns.rs.

#[path = "support/certs.rs"]
mod certs;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use framewire::transport::{
    Address, Connection, ConnectionBuilder, HandshakeOptions, TlsConfig, TransportError,
};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A loopback port nothing listens on (bound, then released).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn builder(connect_timeout: Option<Duration>) -> ConnectionBuilder {
    let mut b = Connection::builder();
    b.connect_timeout(connect_timeout);
    b
}

#[test]
fn a_refused_address_is_tried_until_the_deadline_then_named_in_one_line() {
    let port = free_port();
    let address = format!("tcp://127.0.0.1:{port}");
    let started = Instant::now();
    let err = rt()
        .block_on(
            builder(Some(Duration::from_secs(1))).connect(&address, &HandshakeOptions::default()),
        )
        .expect_err("nothing listens there");
    let elapsed = started.elapsed();
    let TransportError::Connect(e) = &err else {
        panic!("expected a Connect error, got {err:?}");
    };
    assert_eq!(e.address(), address);
    assert_eq!(e.deadline(), Some(Duration::from_secs(1)));
    assert_eq!(e.last_error().kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(
        e.elapsed() >= Duration::from_secs(1) && elapsed >= e.elapsed(),
        "{e:?}"
    );
    // Backoff from 10 ms, doubling, fully jittered and capped by the time
    // left (as Dask's): a dozen or so attempts in a second, neither one nor
    // a busy loop.
    assert!(
        (3..=40).contains(&e.attempts()),
        "{} attempts",
        e.attempts()
    );
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "timed out trying to connect to {address} after 1 s ("
        )),
        "{text}"
    );
    assert!(
        text.ends_with("Connection refused (os error 111)"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1);
}

#[test]
fn without_a_connect_timeout_one_attempt_is_made_and_the_error_names_the_address() {
    let address = format!("tcp://127.0.0.1:{}", free_port());
    let err = rt()
        .block_on(builder(None).connect(&address, &HandshakeOptions::default()))
        .expect_err("nothing listens there");
    let TransportError::Connect(e) = &err else {
        panic!("expected a Connect error, got {err:?}");
    };
    assert_eq!((e.attempts(), e.deadline()), (1, None));
    assert_eq!(
        err.to_string(),
        format!("cannot connect to {address}: Connection refused (os error 111)")
    );
}

#[test]
fn a_server_that_starts_late_is_found() {
    let port = free_port();
    rt().block_on(async {
        let server = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .unwrap();
            let (stream, _) = listener.accept().await.unwrap();
            let (mut conn, _) = Connection::builder()
                .accept(stream, &HandshakeOptions::default())
                .await
                .unwrap();
            conn.recv_value().await.expect("a message").unwrap()
        };
        let client = async {
            let (mut conn, _) = builder(Some(Duration::from_secs(30)))
                .connect(
                    &format!("tcp://127.0.0.1:{port}"),
                    &HandshakeOptions::default(),
                )
                .await
                .expect("connected once the server started");
            conn.send_value(&framewire::Value::str("hello"))
                .await
                .unwrap();
        };
        let (got, ()) = tokio::join!(server, client);
        assert_eq!(got, framewire::Value::str("hello"));
    });
}

#[test]
fn connect_resolves_and_retries_as_connect_does() {
    let port = free_port();
    let err = rt()
        .block_on(
            builder(Some(Duration::from_millis(500)))
                .connect(&format!("127.0.0.1:{port}"), &HandshakeOptions::default()),
        )
        .expect_err("nothing listens there");
    let TransportError::Connect(e) = &err else {
        panic!("expected a Connect error, got {err:?}");
    };
    assert_eq!(e.address(), format!("tcp://127.0.0.1:{port}"));
    assert!(e.attempts() >= 2, "{e:?}");
}

#[test]
fn a_refused_tls_handshake_is_final_at_once() {
    let c = certs::scratch("connect-final");
    let server_tls = TlsConfig::from_pem_files(&c.ca(), &c.cert(), Some(&c.key())).unwrap();
    // The client trusts another CA: the server's certificate is refused.
    let client_tls =
        TlsConfig::from_pem_files(&c.other_ca(), &c.other_cert(), Some(&c.other_key())).unwrap();
    let accepted = Arc::new(AtomicU32::new(0));
    rt().block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let count = accepted.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                let tls = server_tls.clone();
                tokio::spawn(async move {
                    let _ = ConnectionBuilder::new()
                        .tls(tls)
                        .accept_socket(stream, None)
                        .await;
                });
            }
        });
        let mut b = builder(Some(Duration::from_secs(30)));
        b.tls(client_tls);
        let err = b
            .connect_socket(&Address::Tls(format!("localhost:{}", addr.port())))
            .await
            .expect_err("the certificate is refused");
        assert!(matches!(err, TransportError::Tls(_)), "{err:?}");
        assert!(err.to_string().contains("certificate"), "{err}");
    });
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one attempt, no retry");
}
