//! A loopback address that refuses connections.

/// A `tcp://` address on loopback that refuses every connection for as long
/// as the returned socket lives: bound, never listening. A port bound and
/// then closed would do the same only until another process (a test
/// running beside this one) happens to listen on it.
pub fn refusing_address() -> (socket2::Socket, String) {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a socket");
    let any = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    socket.bind(&any.into()).expect("bound on loopback");
    let addr = socket
        .local_addr()
        .expect("its address")
        .as_socket()
        .expect("an IP address");
    (socket, format!("tcp://{addr}"))
}
