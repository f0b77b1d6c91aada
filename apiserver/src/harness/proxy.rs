//! A TCP proxy between a client and the server, to cut a client off as a network failure
//! would: TLS passes through untouched, so it works for the real server's HTTPS as for the
//! embedded server's HTTP.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Forwards it.
    Open,
    /// Holds it until the proxy opens again, as behind a partition.
    Held,
    /// Drops it at once, as a server that is down refuses it.
    Refused,
}

/// A running proxy; dropping it stops it and cuts its connections.
pub struct Proxy {
    addr: SocketAddr,
    open: watch::Sender<Mode>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let addr = listener.local_addr().expect("the proxy's address");
        let (open, open_rx) = watch::channel(Mode::Open);
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let tracked = connections.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut open = open_rx.clone();
                let handle = tokio::spawn(async move {
                    // While the proxy is closed, a new connection waits, as behind a
                    // partition; it goes through once the proxy opens again.
                    match open.wait_for(|mode| *mode != Mode::Held).await.map(|m| *m) {
                        Ok(Mode::Open) => {}
                        _ => return, // refused (or the proxy is gone): dropped at once
                    }
                    if let Ok(mut server) = TcpStream::connect(upstream).await {
                        let _ = client.set_nodelay(true);
                        let _ = server.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                let mut connections = tracked.lock().unwrap();
                connections.retain(|c| !c.is_finished());
                connections.push(handle);
            }
        });
        Proxy { addr, open, connections, accept }
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts every open connection and holds new ones until [`open`](Self::open).
    pub fn close(&self) {
        self.open.send_replace(Mode::Held);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    /// Lets connections through again.
    pub fn open(&self) {
        self.open.send_replace(Mode::Open);
    }

    /// Cuts every open connection and drops new ones at once until [`open`](Self::open), as
    /// a server that is down refuses them.
    pub fn refuse(&self) {
        self.open.send_replace(Mode::Refused);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    /// Cuts every open connection; new ones go through.
    pub fn cut(&self) {
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.close();
    }
}
