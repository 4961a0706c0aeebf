//! Our TLS record layer against OpenSSL's (`openssl s_server` and
//! `s_client`, loopback): application data both ways, TLS 1.3 with key
//! updates in both directions (OpenSSL's `k` / `K` commands, ours with
//! `TlsStream::update_keys`), and TLS 1.2 with AES-GCM and ChaCha20-Poly1305.
//! Fails, never skips, when the `openssl` command is missing.

#[path = "support/certs.rs"]
mod certs;
#[path = "support/tls.rs"]
mod tls_support;

use tls_support::{builder, node_config, rt};

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use framewire::transport::{Address, Socket};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::process::{Child, ChildStdin, Command};

/// An `openssl` process: its stdin, and all it printed so far.
struct OpenSsl {
    child: Child,
    stdin: ChildStdin,
    out: Arc<Mutex<String>>,
}

impl OpenSsl {
    fn spawn(args: &[String]) -> OpenSsl {
        let mut child = Command::new("openssl")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the openssl command (OpenSSL's CLI) is needed by this test");
        let out = Arc::new(Mutex::new(String::new()));
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let out = out.clone();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut o = out.lock().unwrap();
                    o.push_str(&line);
                    o.push('\n');
                }
            });
        }
        let stdin = child.stdin.take().unwrap();
        OpenSsl { child, stdin, out }
    }

    async fn type_line(&mut self, line: &str) {
        let typed = async {
            self.stdin.write_all(line.as_bytes()).await?;
            self.stdin.write_all(b"\n").await?;
            self.stdin.flush().await
        };
        if let Err(e) = typed.await {
            panic!(
                "typing {line:?}: {e}; openssl printed:\n{}",
                self.out.lock().unwrap()
            );
        }
    }

    /// A `k` or `K` command. OpenSSL reads its stdin a buffer at a time
    /// and takes a whole buffer that starts with the letter as the command:
    /// nothing more is typed for a moment (`s_client` says KEYUPDATE;
    /// `s_server` says nothing: the moment is a pause, and the test checks
    /// the key update on our side, `TlsStream::key_updates`).
    async fn key_update(&mut self, letter: &str) {
        let said = self.out.lock().unwrap().matches("KEYUPDATE").count();
        self.type_line(letter).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        if self.out.lock().unwrap().contains("CONNECTED(") {
            // s_client: it says so.
            self.wait_for_count("KEYUPDATE", said + 1).await;
        }
    }

    /// Waits until it printed `text` (a hang guard of 20 s, not a timing).
    async fn wait_for(&self, text: &str) {
        self.wait_for_count(text, 1).await
    }

    async fn wait_for_count(&self, text: &str, count: usize) {
        let start = Instant::now();
        while self.out.lock().unwrap().matches(text).count() < count {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "openssl never printed {text:?}; it printed:\n{}",
                self.out.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One test with OpenSSL at a time: `s_server` binds a port found free a
/// moment before, which a parallel test's listener could take meanwhile.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

async fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap().port()
}

fn cert_args(c: &certs::Certs) -> Vec<String> {
    vec![
        "-cert".into(),
        c.cert().display().to_string(),
        "-key".into(),
        c.key().display().to_string(),
        "-CAfile".into(),
        c.ca().display().to_string(),
    ]
}

/// KeyUpdates `(sent, received)` on a TLS socket.
fn updates(s: &Socket) -> (u64, u64) {
    match s {
        Socket::TlsClient(t) | Socket::TlsServer(t) => t.key_updates(),
        _ => panic!("not TLS"),
    }
}

/// Reads from `s` until `want` has come (a hang guard of 20 s).
async fn read_until(s: &mut Socket, want: &str) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    while !String::from_utf8_lossy(&got).contains(want) {
        let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("{want:?} never came"))
            .unwrap();
        assert!(n > 0, "the stream ended before {want:?}");
        got.extend_from_slice(&buf[..n]);
        assert!(start.elapsed() < Duration::from_secs(20));
    }
}

#[test]
fn our_client_and_openssl_s_server_update_keys_both_ways_tls13() {
    let _one = one_at_a_time();
    let c = certs::scratch("tls-openssl-server13");
    let ours = node_config(&c);
    rt().block_on(async {
        let port = free_port().await;
        let mut args: Vec<String> = ["s_server", "-accept"].map(String::from).to_vec();
        args.push(format!("127.0.0.1:{port}"));
        args.extend(cert_args(&c));
        args.extend(["-Verify", "1", "-tls1_3"].map(String::from));
        let mut server = OpenSsl::spawn(&args);
        server.wait_for("ACCEPT").await;
        let address = Address::Tls(format!("127.0.0.1:{port}"));
        let mut s = builder(Some(&ours)).connect_socket(&address).await.unwrap();
        assert!(s.cipher_suite().unwrap().starts_with("TLS13_"));

        s.write_all(b"hello from framewire\n").await.unwrap();
        s.flush().await.unwrap();
        server.wait_for("hello from framewire").await;

        // (OpenSSL's own KeyUpdates, `k` and `K`, are typed into `s_client`
        // in the test below, which says when it sent one; `s_server` does
        // not, and on a loaded machine it took the letter and the next line
        // together, as data.)

        // Ours, asking for OpenSSL's.
        let Socket::TlsClient(t) = &mut s else {
            panic!("TLS")
        };
        t.update_keys(true).unwrap();
        s.write_all(b"framewire updated\n").await.unwrap();
        s.flush().await.unwrap();
        server.wait_for("framewire updated").await;
        server.type_line("openssl answered").await;
        read_until(&mut s, "openssl answered").await;
        assert_eq!(
            updates(&s),
            (1, 1),
            "(sent, received): OpenSSL answered ours"
        );

        // A large message through the new keys. (`s_client`'s `k`, not
        // asking, is in the test below: `s_server` 3.0 sent no further
        // KeyUpdate for a `K` or `k` typed after it had answered ours.)
        let big: String = (0..20_000).map(|i| format!("{i:08}")).collect();
        s.write_all(format!("{big}\nbig done\n").as_bytes())
            .await
            .unwrap();
        s.flush().await.unwrap();
        server.wait_for("big done").await;
        assert!(server.out.lock().unwrap().contains(&big[..1000]));
        s.shutdown().await.unwrap();
        server.child.kill().await.unwrap();
    });
}

#[test]
fn openssl_s_client_and_our_server_update_keys_both_ways_tls13() {
    let _one = one_at_a_time();
    let c = certs::scratch("tls-openssl-client13");
    let ours = node_config(&c);
    rt().block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut s = builder(Some(&ours)).accept_socket(tcp, None).await.unwrap();
            // Echoes each read, upper-cased; "update" asks for our KeyUpdate.
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = s.read(&mut buf).await.expect("our server's read");
                if n == 0 {
                    panic!("s_client ended the stream before the last line");
                }
                if buf[..n].windows(6).any(|w| w == b"update") {
                    let Socket::TlsServer(t) = &mut s else {
                        panic!("TLS")
                    };
                    t.update_keys(true).unwrap();
                }
                let upper = buf[..n].to_ascii_uppercase();
                s.write_all(&upper).await.unwrap();
                s.flush().await.unwrap();
                if upper.windows(4).any(|w| w == b"FOUR") {
                    // The last line: close_notify, and the counts.
                    s.shutdown().await.unwrap();
                    return updates(&s);
                }
            }
        });
        let mut args: Vec<String> = ["s_client", "-connect"].map(String::from).to_vec();
        args.push(format!("127.0.0.1:{port}"));
        args.extend(cert_args(&c));
        args.extend(["-tls1_3", "-verify_return_error"].map(String::from));
        let mut client = OpenSsl::spawn(&args);
        client.wait_for("Verify return code: 0").await;
        client.type_line("ping one").await;
        client.wait_for("PING ONE").await;
        client.key_update("K").await; // asks for ours
        client.type_line("ping two").await;
        client.wait_for("PING TWO").await;
        client.type_line("please update").await; // ours, asking for OpenSSL's
        client.wait_for("PLEASE UPDATE").await;
        client.type_line("ping three").await;
        client.wait_for("PING THREE").await;
        client.key_update("k").await;
        client.type_line("ping four").await;
        client.wait_for("PING FOUR").await;
        // Sent: the answer to K, ours; received: K, the answer to ours, k.
        assert_eq!(server.await.unwrap(), (2, 3), "(sent, received)");
        // (Nothing is typed after the last echo: `s_client` 3.0 sometimes
        // exited right after it, in about one run in ten here, our side
        // having seen no end of stream: cause not found.)
        let out = client.out.lock().unwrap().clone();
        assert!(!out.lines().any(|l| l.contains(":error:")), "{out}");
        client.child.kill().await.unwrap();
    });
}

#[test]
fn tls12_with_openssl_aes_gcm_and_chacha20() {
    let _one = one_at_a_time();
    let c = certs::scratch("tls-openssl-12");
    let ours = node_config(&c);
    rt().block_on(async {
        for (cipher, name) in [
            (
                "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256",
                "AES_128_GCM",
            ),
            (
                "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384",
                "AES_256_GCM",
            ),
            (
                "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305",
                "CHACHA20",
            ),
        ] {
            let port = free_port().await;
            let mut args: Vec<String> = ["s_server", "-accept"].map(String::from).to_vec();
            args.push(format!("127.0.0.1:{port}"));
            args.extend(cert_args(&c));
            args.extend(["-Verify", "1", "-tls1_2", "-cipher", cipher].map(String::from));
            let mut server = OpenSsl::spawn(&args);
            server.wait_for("ACCEPT").await;
            let mut s = builder(Some(&ours))
                .connect_socket(&Address::Tls(format!("127.0.0.1:{port}")))
                .await
                .unwrap();
            let suite = s.cipher_suite().unwrap();
            assert!(
                suite.starts_with("TLS_ECDHE") && suite.contains(name),
                "{suite}"
            );
            let big: String = (0..30_000).map(|i| format!("{i:08}")).collect();
            s.write_all(format!("{big}\ntls12 done\n").as_bytes())
                .await
                .unwrap();
            s.flush().await.unwrap();
            server.wait_for("tls12 done").await;
            server.type_line("from openssl over 1.2").await;
            read_until(&mut s, "from openssl over 1.2").await;
            let Socket::TlsClient(t) = &mut s else {
                panic!("TLS")
            };
            assert!(t.update_keys(false).is_err(), "no KeyUpdate in TLS 1.2");
            s.shutdown().await.unwrap();
            server.child.kill().await.unwrap();
        }
    });
}
