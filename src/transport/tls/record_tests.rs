//! The record layer against RFC 8448 §3 (Simple 1-RTT Handshake): the
//! application traffic keys it publishes, and the exact records sealed
//! with them; then every kind of bad record, each an error.

use super::*;

fn h(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

// RFC 8448 §3, "{client} derive write traffic keys for application data".
const CLIENT_KEY: &str = "17 42 2d da 59 6e d5 d9 ac d8 90 e3 c6 3f 50 51";
const CLIENT_IV: &str = "5b 78 92 3d ee 08 57 90 33 e5 23 d9";
// "{server} derive write traffic keys for application data".
const SERVER_KEY: &str = "9f 02 28 3b 6c 9c 07 ef c2 6b b9 f2 ac 92 e3 56";
const SERVER_IV: &str = "cf 78 2b 88 dd 83 54 9a ad f1 e9 84";

/// "{server} send handshake record": the NewSessionTicket, the server's
/// first record under its application keys (sequence number 0).
const SERVER_NST: &str = "17 03 03 00 de 3a 6b 8f 90 41 4a 97 d6 95 9c 34 87 68 0d e5 13 4a 2b 24
    0e 6c ff ac 11 6e 95 d4 1d 6a f8 f6 b5 80 dc f3 d1 1d 63 c7 58 db 28 9a
    01 59 40 25 2f 55 71 3e 06 1d c1 3e 07 88 91 a3 8e fb cf 57 53 ad 8e f1
    70 ad 3c 73 53 d1 6d 9d a7 73 b9 ca 7f 2b 9f a1 b6 c0 d4 a3 d0 3f 75 e0
    9c 30 ba 1e 62 97 2a c4 6f 75 f7 b9 81 be 63 43 9b 29 99 ce 13 06 46 15
    13 98 91 d5 e4 c5 b4 06 f1 6e 3f c1 81 a7 7c a4 75 84 00 25 db 2f 0a 77
    f8 1b 5a b0 5b 94 c0 13 46 75 5f 69 23 2c 86 51 9d 86 cb ee ac 87 aa c3
    47 d1 43 f9 60 5d 64 f6 50 db 4d 02 3e 70 e9 52 ca 49 fe 51 37 12 1c 74
    bc 26 97 68 7e 24 87 46 d6 df 35 30 05 f3 bc e1 86 96 12 9c 81 53 55 6b
    3b 6c 67 79 b3 7b f1 59 85 68 4f";
/// "{client} send application_data record": 00 01 … 31 (client seq 0).
const CLIENT_APP: &str = "17 03 03 00 43 a2 3f 70 54 b6 2c 94 d0 af fa fe 82 28 ba 55 cb ef ac ea
    42 f9 14 aa 66 bc ab 3f 2b 98 19 a8 a5 b4 6b 39 5b d5 4a 9a 20 44 1e 2b
    62 97 4e 1f 5a 62 92 a2 97 70 14 bd 1e 3d ea e6 3a ee bb 21 69 49 15 e4";
/// "{server} send application_data record": the same (server seq 1).
const SERVER_APP: &str = "17 03 03 00 43 2e 93 7e 11 ef 4a c7 40 e5 38 ad 36 00 5f c4 a4 69 32 fc
    32 25 d0 5f 82 aa 1b 36 e3 0e fa f9 7d 90 e6 df fc 60 2d cb 50 1a 59 a8
    fc c4 9c 4b f2 e5 f0 a2 1c 00 47 c2 ab f3 32 54 0d d0 32 e1 67 c2 95 5d";
/// "{client} send alert record": close_notify (client seq 1).
const CLIENT_ALERT: &str =
    "17 03 03 00 13 c9 87 27 60 65 56 66 b7 4d 7f f1 15 3e fd 6d b6 d0 b0 e3";
/// "{server} send alert record": close_notify (server seq 2).
const SERVER_ALERT: &str =
    "17 03 03 00 13 b5 8f d6 71 66 eb f5 99 d2 47 20 cf be 7e fa 7a 88 64 a9";

fn keys(key: &str, iv: &str) -> RecordKeys {
    RecordKeys::new(Version::Tls13, Cipher::Aes128Gcm, &h(key), &h(iv), 0).unwrap()
}

/// Opens the one record in `record` (header first), returning the type
/// and plaintext.
fn open_one(k: &mut RecordKeys, record: &[u8]) -> Result<(ContentType, Vec<u8>), TlsError> {
    let header = k.header(record[..HEADER].try_into().unwrap())?;
    let mut window = record.to_vec();
    assert_eq!(window.len(), HEADER + header.len);
    let opened = k.open(&header, &mut window, HEADER)?;
    Ok((opened.typ, window[..opened.len].to_vec()))
}

fn app_data() -> Vec<u8> {
    (0u8..50).collect()
}

#[test]
fn sealing_gives_rfc8448s_records_byte_for_byte() {
    let mut client = keys(CLIENT_KEY, CLIENT_IV);
    let mut out = Vec::new();
    client
        .seal(
            ContentType::ApplicationData,
            &[&app_data()[..20], &app_data()[20..]],
            &mut out,
        )
        .unwrap();
    assert_eq!(out, h(CLIENT_APP), "client application data, seq 0");
    out.clear();
    client
        .seal(ContentType::Alert, &[&[1, 0]], &mut out)
        .unwrap();
    assert_eq!(out, h(CLIENT_ALERT), "client close_notify, seq 1");

    let mut server = keys(SERVER_KEY, SERVER_IV);
    // Seq 0 is the NewSessionTicket: open it to move on, then seal it back.
    let (typ, nst) = open_one(&mut keys(SERVER_KEY, SERVER_IV), &h(SERVER_NST)).unwrap();
    assert_eq!(typ, ContentType::Handshake);
    assert_eq!(nst[0], 4, "a NewSessionTicket");
    out.clear();
    server
        .seal(ContentType::Handshake, &[&nst], &mut out)
        .unwrap();
    assert_eq!(out, h(SERVER_NST), "server NewSessionTicket, seq 0");
    out.clear();
    server
        .seal(ContentType::ApplicationData, &[&app_data()], &mut out)
        .unwrap();
    assert_eq!(out, h(SERVER_APP), "server application data, seq 1");
    out.clear();
    server
        .seal(ContentType::Alert, &[&[1, 0]], &mut out)
        .unwrap();
    assert_eq!(out, h(SERVER_ALERT), "server close_notify, seq 2");
}

#[test]
fn opening_rfc8448s_records_gives_their_plaintext() {
    let mut server = keys(CLIENT_KEY, CLIENT_IV); // reads the client's
    assert_eq!(
        open_one(&mut server, &h(CLIENT_APP)).unwrap(),
        (ContentType::ApplicationData, app_data())
    );
    assert_eq!(
        open_one(&mut server, &h(CLIENT_ALERT)).unwrap(),
        (ContentType::Alert, vec![1, 0])
    );
    let mut client = keys(SERVER_KEY, SERVER_IV);
    assert_eq!(
        open_one(&mut client, &h(SERVER_NST)).unwrap().0,
        ContentType::Handshake
    );
    assert_eq!(
        open_one(&mut client, &h(SERVER_APP)).unwrap(),
        (ContentType::ApplicationData, app_data())
    );
    assert_eq!(
        open_one(&mut client, &h(SERVER_ALERT)).unwrap(),
        (ContentType::Alert, vec![1, 0])
    );
}

#[test]
fn records_back_to_back_open_into_contiguous_plaintext() {
    // As the stream does in a caller's buffer: each record's plaintext
    // lands right after the previous one's, the headers and tags gone.
    for (version, cipher, key_len) in [
        (Version::Tls13, Cipher::Aes128Gcm, 16),
        (Version::Tls13, Cipher::Aes256Gcm, 32),
        (Version::Tls13, Cipher::Chacha20Poly1305, 32),
        (Version::Tls12, Cipher::Aes128Gcm, 16),
        (Version::Tls12, Cipher::Aes256Gcm, 32),
        (Version::Tls12, Cipher::Chacha20Poly1305, 32),
    ] {
        let key = vec![0x42; key_len];
        let iv = [7u8; 12];
        let mut tx = RecordKeys::new(version, cipher, &key, &iv, 5).unwrap();
        let mut rx = RecordKeys::new(version, cipher, &key, &iv, 5).unwrap();
        let data: Vec<u8> = (0..40_000u32).map(|i| (i * 7) as u8).collect();
        let mut wire = Vec::new();
        for chunk in data.chunks(MAX_PLAINTEXT) {
            tx.seal(ContentType::ApplicationData, &[chunk], &mut wire)
                .unwrap();
        }
        let (mut r, mut w) = (0, 0);
        while r < wire.len() {
            let header = rx.header(wire[r..r + HEADER].try_into().unwrap()).unwrap();
            let end = r + HEADER + header.len;
            let opened = rx.open(&header, &mut wire[w..end], r - w + HEADER).unwrap();
            assert_eq!(opened.typ, ContentType::ApplicationData);
            w += opened.len;
            r = end;
        }
        assert_eq!(&wire[..w], &data[..], "{version:?} {cipher:?}");
    }
}

#[test]
fn bad_records_are_errors_and_never_plaintext() {
    let record = h(CLIENT_APP);
    let fresh = || keys(CLIENT_KEY, CLIENT_IV);
    // Every bit of every byte after the header, flipped.
    for i in HEADER..record.len() {
        for bit in 0..8 {
            let mut bad = record.clone();
            bad[i] ^= 1 << bit;
            let err = open_one(&mut fresh(), &bad).unwrap_err();
            assert!(err.to_string().contains("bad_record_mac"), "{err}");
        }
    }
    // The header is authenticated too (the length is checked first).
    let mut bad = record.clone();
    bad[0] = 0x16;
    assert!(open_one(&mut fresh(), &bad)
        .unwrap_err()
        .to_string()
        .contains("content type 22"));
    let mut bad = record.clone();
    bad[2] = 0x01;
    assert!(open_one(&mut fresh(), &bad)
        .unwrap_err()
        .to_string()
        .contains("version"));
    // Replayed (seq 1 expects another nonce) and reordered.
    let mut k = fresh();
    open_one(&mut k, &record).unwrap();
    assert!(open_one(&mut k, &record).is_err(), "replayed");
    let mut k = fresh();
    assert!(open_one(&mut k, &h(CLIENT_ALERT)).is_err(), "reordered");
    // Too long for a TLS 1.3 record; too short for its tag.
    let k = fresh();
    let err = k.header([23, 3, 3, 0x41, 0x01]).unwrap_err();
    assert!(err.to_string().contains("record_overflow"), "{err}");
    let err = k.header([23, 3, 3, 0, 16]).unwrap_err();
    assert!(err.to_string().contains("shorter"), "{err}");
}

#[test]
fn inner_content_types_are_checked() {
    let key = [1u8; 16];
    let iv = [2u8; 12];
    let seal_raw = |inner: &[u8]| {
        // A TLS 1.3 record whose inner plaintext is `inner` exactly.
        let mut k = RecordKeys::new(Version::Tls13, Cipher::Aes128Gcm, &key, &iv, 0).unwrap();
        let body = inner.len() + TAG;
        let header = [23, 3, 3, (body >> 8) as u8, body as u8];
        let mut out = header.to_vec();
        out.extend_from_slice(inner);
        let seq = k.next_seq().unwrap();
        let nonce = Nonce::assume_unique_for_key(k.xor_nonce(seq));
        let tag = k
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(header), &mut out[HEADER..])
            .unwrap();
        out.extend_from_slice(tag.as_ref());
        out
    };
    let rx = || RecordKeys::new(Version::Tls13, Cipher::Aes128Gcm, &key, &iv, 0).unwrap();
    // Padding is stripped.
    let padded = seal_raw(&[b'h', b'i', 23, 0, 0, 0]);
    assert_eq!(
        open_one(&mut rx(), &padded).unwrap(),
        (ContentType::ApplicationData, b"hi".to_vec())
    );
    for (inner, says) in [
        (&[0u8, 0, 0][..], "no content type"),
        (&[b'x', 20][..], "inner content type 20"),
        (&[b'x', 99][..], "inner content type 99"),
    ] {
        let err = open_one(&mut rx(), &seal_raw(inner)).unwrap_err();
        assert!(err.to_string().contains(says), "{err}");
    }
    // 2^14 + 1 bytes of plaintext: record_overflow, though it authenticates.
    let mut big = vec![1u8; MAX_PLAINTEXT + 1];
    big.push(23);
    let err = open_one(&mut rx(), &seal_raw(&big)).unwrap_err();
    assert!(err.to_string().contains("record_overflow"), "{err}");
}

#[test]
fn sequence_numbers_never_wrap() {
    let mut k = RecordKeys::new(
        Version::Tls13,
        Cipher::Aes128Gcm,
        &[0; 16],
        &[0; 12],
        u64::MAX,
    )
    .unwrap();
    let mut out = Vec::new();
    let err = k
        .seal(ContentType::ApplicationData, &[b"x"], &mut out)
        .unwrap_err();
    assert!(err.to_string().contains("exhausted"), "{err}");
}
