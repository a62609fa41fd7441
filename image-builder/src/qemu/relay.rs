//! The guest forwards' relay: qemu runs `foothold-build relay <addr>` for each connection a guest makes to a
//! guest forward, and it carries the connection to a port on this host's loopback.

use anyhow::{Context as _, Result};
use std::path::Path;

/// qemu's `guestfwd` option for one forward: the guest's connections to `address:port` are relayed by `relay`
/// (`foothold-build relay`, one process a connection) to 127.0.0.1:`host_port`.
pub fn guestfwd(address: &str, port: u16, relay: &Path, host_port: u16) -> String {
    format!(
        ",guestfwd=tcp:{address}:{port}-cmd:{} relay 127.0.0.1:{host_port}",
        relay.display()
    )
}

/// Relays one connection: stdin to `addr` and what `addr` answers to stdout, unbuffered, until both ends are
/// done (qemu runs this for each connection a guest makes to a guest forward).
pub fn relay(addr: &str) -> Result<()> {
    use std::io::Write as _;
    use std::os::fd::AsFd as _;
    let socket =
        std::net::TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    let mut from = socket.try_clone()?;
    let mut stdout = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    let back = std::thread::spawn(move || -> std::io::Result<u64> {
        let n = std::io::copy(&mut from, &mut stdout)?;
        stdout.flush()?;
        Ok(n)
    });
    let mut stdin = std::fs::File::from(std::io::stdin().as_fd().try_clone_to_owned()?);
    let mut to = socket.try_clone()?;
    let sent = std::io::copy(&mut stdin, &mut to);
    // The guest is done sending: say so, and let the answer finish.
    let _ = socket.shutdown(std::net::Shutdown::Write);
    let answered = back
        .join()
        .map_err(|_| anyhow::anyhow!("the relay's reader panicked"))?;
    sent.with_context(|| format!("relaying to {addr}"))?;
    answered.with_context(|| format!("relaying from {addr}"))?;
    Ok(())
}
