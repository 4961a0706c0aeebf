//! Key updates at the confidentiality limit, against rustls' own stream
//! (tokio-rustls) on the other end: it must follow every one.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::transport::{Address, Socket, TlsConfig};

#[path = "../../../tests/support/certs.rs"]
#[allow(unreachable_pub)]
mod certs;

/// A connection builder with these certificates.
fn tls_builder(tls: &TlsConfig) -> crate::transport::ConnectionBuilder {
    let mut b = crate::transport::ConnectionBuilder::new();
    b.tls(tls.clone());
    b
}

#[test]
fn keys_are_updated_before_the_limit_and_rustls_follows() {
    let c = certs::scratch("tls-stream-limit");
    let ours = TlsConfig::from_pem_files(&c.ca(), &c.cert(), Some(&c.key())).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(ours.server_config()));
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut s = acceptor.accept(tcp).await.unwrap();
            let mut buf = vec![0u8; 1 << 20];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf).await.unwrap();
            s.flush().await.unwrap();
        });
        let mut s = tls_builder(&ours)
            .connect_socket(&Address::Tls(addr.to_string()))
            .await
            .unwrap();
        let Socket::TlsClient(t) = &mut s else {
            panic!("TLS")
        };
        t.set_key_limit(4);
        let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        s.write_all(&data).await.unwrap();
        s.flush().await.unwrap();
        let mut back = vec![0u8; data.len()];
        s.read_exact(&mut back).await.unwrap();
        assert!(back == data, "the data came back through every key");
        let Socket::TlsClient(t) = &s else {
            panic!("TLS")
        };
        // 64 records of 16 KiB, a new key every 4 (the KeyUpdate record
        // counts under the old one).
        let (sent, _) = t.key_updates();
        assert!(sent >= 12, "{sent} key updates");
        server.await.unwrap();
    });
}
