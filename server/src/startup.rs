//! Checks before any executor starts, each failing with a message that says
//! what to change, because glommio's own failures here are obscure (a panic
//! or an ENOMEM deep inside ring setup): io_uring available,
//! enough locked memory, O_DIRECT on the data directory, the shard count
//! recorded in the data directory (none of these three with `--in-memory`,
//! which checks instead that no one else listens on its address), and the
//! CPUs we may run on.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// CPUs in this process's affinity mask (not all online CPUs: containers and
/// taskset restrict it, and glommio's own placement ignores that).
pub fn affinity_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect();
        if cpus.is_empty() {
            vec![0]
        } else {
            cpus
        }
    }
}

pub fn check_io_uring() -> Result<(), String> {
    // SAFETY: io_uring_params is plain data; the fd is closed right away.
    unsafe {
        let mut p: [u8; 120] = [0; 120];
        let fd = libc::syscall(libc::SYS_io_uring_setup, 4u32, p.as_mut_ptr());
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").unwrap_or_default();
            return Err(format!(
                "io_uring is not available ({err}). Hematite needs Linux 5.8+ with io_uring enabled: check /proc/sys/kernel/io_uring_disabled (now '{}'), and in containers allow the io_uring_* syscalls (Docker's default seccomp profile blocks them).",
                disabled.trim()
            ));
        }
        libc::close(fd as i32);
    }
    Ok(())
}

/// Locked memory the executors need: each locks its rings (~512 KiB) plus
/// its registered buffers.
pub fn memlock_needed(shards: usize, io_memory_kib: usize) -> u64 {
    (shards as u64)
        .saturating_mul((io_memory_kib as u64).saturating_add(512))
        .saturating_mul(1024)
}

pub fn check_memlock(shards: usize, io_memory_kib: usize) -> Result<(), String> {
    let need = memlock_needed(shards, io_memory_kib);
    // SAFETY: getrlimit fills a plain struct.
    let lim = unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) != 0 {
            return Ok(());
        }
        r.rlim_cur
    };
    if lim != libc::RLIM_INFINITY && lim < need {
        return Err(format!(
            "locked memory limit is {} KiB but {shards} shard(s) with --io-memory-kib {io_memory_kib} need about {} KiB. Raise it (`ulimit -l {}`, or LimitMEMLOCK= in a systemd unit), or use fewer --shards or a smaller --io-memory-kib.",
            lim / 1024,
            need / 1024,
            need / 1024
        ));
    }
    Ok(())
}

/// Writes one aligned block with O_DIRECT into the data directory.
pub fn check_o_direct(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create the data directory {}: {e}", dir.display()))?;
    let probe = dir.join(".odirect-probe");
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(&probe)?;
        let block = engine::disk::dma::AlignedBuf::copy_of(&[0u8; 4096], 4096)?;
        f.write_all(block.as_slice())
    })();
    let _ = std::fs::remove_file(&probe);
    result.map_err(|e| {
        format!(
            "the data directory {} does not support O_DIRECT writes ({e}). Use a directory on a local filesystem such as ext4 or xfs (not tmpfs or a network filesystem): --data-dir PATH.",
            dir.display()
        )
    })
}

/// Records the shard count on first start; refuses a different count later,
/// because queues are placed by hash modulo the count.
pub fn check_shard_count(dir: &Path, shards: usize) -> Result<(), String> {
    let file = dir.join("SHARDS");
    let want = format!("shards={shards}\nhash=xxh3_64(account/queue)\n");
    match std::fs::read_to_string(&file) {
        Ok(have) => {
            if have != want {
                let recorded = have.lines().next().unwrap_or("").trim_start_matches("shards=");
                return Err(format!(
                    "the data directory {} was created with {recorded} shard(s) but --shards is {shards}. Queues are placed by shard, so the count cannot change: start with --shards {recorded}.",
                    dir.display()
                ));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let tmp = dir.join("SHARDS.tmp");
            let write = || -> std::io::Result<()> {
                let mut f = std::fs::File::create(&tmp)?;
                f.write_all(want.as_bytes())?;
                f.sync_all()?;
                std::fs::rename(&tmp, &file)?;
                std::fs::File::open(dir)?.sync_all()
            };
            write().map_err(|e| format!("cannot write {}: {e}", file.display()))
        }
        Err(e) => Err(format!("cannot read {}: {e}", file.display())),
    }
}

/// Takes an exclusive lock on the data directory for the life of the
/// process, so a second server, on another port, cannot share the
/// directory ([`PortClaim`] refuses one on the same port).
pub fn lock_data_dir(dir: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::io::AsRawFd;
    let path = dir.join("LOCK");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(format!(
            "the data directory {} is in use by another hematite process; stop it or use another --data-dir",
            dir.display()
        ));
    }
    Ok(f)
}

/// Refuses an address another process already listens on, in memory
/// (`--in-memory`), as before [`PortClaim`] (which only Hematite servers
/// take): any other program that binds with SO_REUSEPORT too. Not on
/// disk, where a restart right after a kill might meet this probe before
/// the old listener is gone (its io_uring requests may hold it a moment
/// past the exit; not observed). The probe connects: a trial bind would
/// also fail on the previous run's connections in TIME_WAIT, which are no
/// one's listener.
pub fn check_address_free(addr: std::net::SocketAddr) -> Result<(), String> {
    let mut probe = addr;
    if probe.ip().is_unspecified() {
        probe.set_ip(match addr {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    match std::net::TcpStream::connect_timeout(&probe, std::time::Duration::from_secs(1)) {
        Ok(_) => Err(format!(
            "something already listens on {addr}; is another hematite running there? Stop it or use another --addr"
        )),
        Err(_) => Ok(()),
    }
}

/// A TCP port this process serves, claimed among the Hematite servers of
/// its network namespace for as long as this value lives.
///
/// Why: every core binds with SO_REUSEPORT, which the kernel lets a second
/// process of the same user share, splitting the connections between the
/// two servers, each with its own queues. A program that binds without
/// SO_REUSEPORT makes our bind fail, loudly; another Hematite would not.
/// The claim is an abstract Unix socket named after the port: the kernel
/// refuses a second bind of the name, needs no file, and lets it go when
/// the process ends, however it ends (so a restart after kill -9 finds it
/// free), unlike a probe, which a listener still held by the ring's
/// teardown after a kill can answer, and which a server still recovering,
/// not yet listening, cannot. It is by port, whatever the host: `0.0.0.0`
/// and `[::]` cover every address, and a server on one address of a port
/// beside another on another is refused too, which costs nothing real.
/// Port 0 (the kernel's choice) is not claimed. Any process of the
/// namespace may bind such a name, so one squatting it refuses a server
/// the port: the error names the socket, which `ss -xlp` shows with its
/// holder (docs/OPERATIONS.md). The server needs Unix sockets for it
/// (`RestrictAddressFamilies` must keep `AF_UNIX`).
pub struct PortClaim(#[allow(dead_code)] Option<std::os::unix::net::UnixListener>);

/// Claims `port` ([`PortClaim`]), or says that another Hematite holds it,
/// and what to do: `fix` (only when the name is taken: any other error
/// is not a matter of another address).
pub fn claim_port(port: u16, fix: &str) -> Result<PortClaim, String> {
    use std::os::linux::net::SocketAddrExt;
    if port == 0 {
        return Ok(PortClaim(None));
    }
    let name = format!("hematite-port-{port}");
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| format!("cannot name the claim on port {port}: {e}"))?;
    match std::os::unix::net::UnixListener::bind_addr(&addr) {
        Ok(l) => Ok(PortClaim(Some(l))),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(format!(
            "another hematite already serves port {port} (it holds the Unix socket @{name}: `ss -xlp | grep @{name}` shows which process); {fix}"
        )),
        Err(e) => Err(format!(
            "cannot claim port {port} among Hematite servers with the Unix socket @{name}: {e}"
        )),
    }
}

/// Refuses an admin address on the queue service's port: both listeners
/// bind with SO_REUSEPORT, so where their hosts overlap the kernel would
/// split connections between them, clients' requests landing on /metrics
/// and scrapes on the queue service. By port, whatever the hosts, as
/// [`PortClaim`] is.
pub fn check_admin_apart(addr: std::net::SocketAddr, admin: std::net::SocketAddr) -> Result<(), String> {
    // Port 0 binds are given distinct ports by the kernel.
    if addr.port() == admin.port() && addr.port() != 0 {
        return Err(format!(
            "--admin-addr {admin} overlaps --addr {addr}: the two would share the port and split its connections; give the admin address another port"
        ));
    }
    Ok(())
}

/// Raises the open-file soft limit to the hard limit: every connection is a
/// descriptor, and the default soft limit (often 1024) is below
/// `--max-connections-per-core` on any multi-core machine.
pub fn raise_open_file_limit() {
    // SAFETY: get/setrlimit on plain structs.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                tracing::warn!(
                    "could not raise the open-file limit: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
}

/// Sets whether the kernel may back this process's memory with transparent
/// huge pages: off unless `allow`, and with `allow` the process's own
/// switch is cleared, so the system's policy applies (a parent that turned
/// them off for itself does not decide for us). The switch belongs to the
/// whole process and the kernel reads it at each page fault, so it covers
/// memory mapped before this call; pages already backed stay as they are,
/// which is why `main` calls this first. Why off: a 2 MiB page is zeroed in
/// one fault, on the core that touched it, and on a guest whose free memory
/// goes back to the host that fault took 4.5-6.5 ms
/// (docs/decisions/0006-no-huge-pages.md). An error is for the caller to
/// log: the server works either way.
pub fn set_huge_pages(allow: bool) -> std::io::Result<()> {
    let disable: libc::c_ulong = if allow { 0 } else { 1 };
    let zero: libc::c_ulong = 0;
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, disable, zero, zero, zero) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {

    /// A port is claimed once among the processes of a network namespace
    /// (and within one), and free again when the claim is dropped.
    #[test]
    fn a_port_is_claimed_once_and_freed_with_its_claim() {
        // A port no server here has: the kernel's free one.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let claim = super::claim_port(port, "the fix").unwrap();
        let again = super::claim_port(port, "the fix").err().unwrap_or_default();
        assert!(
            again.contains("another hematite already serves port") && again.ends_with("; the fix"),
            "{again}"
        );
        drop(claim);
        drop(super::claim_port(port, "").unwrap());
        assert!(
            super::claim_port(0, "").is_ok() && super::claim_port(0, "").is_ok(),
            "port 0 is not claimed"
        );
    }

    /// The admin address may not share the queue service's port, on any
    /// host (IPv6's `[::]` takes IPv4 connections too here); port 0 is the
    /// kernel's choice, distinct for each.
    #[test]
    fn admin_and_queue_addresses_never_share_a_port() {
        let a = |s: &str| s.parse::<std::net::SocketAddr>().unwrap();
        // (queue address, admin address, refused)
        let cases = [
            ("127.0.0.1:10001", "127.0.0.1:10001", true),
            ("0.0.0.0:10001", "127.0.0.1:10001", true),
            ("127.0.0.1:10001", "0.0.0.0:10001", true),
            ("[::]:10001", "127.0.0.1:10001", true),
            ("[::1]:10001", "[::]:10001", true),
            ("127.0.0.1:10001", "127.0.0.2:10001", true),
            ("127.0.0.1:10001", "127.0.0.1:10011", false),
            ("0.0.0.0:10001", "0.0.0.0:10011", false),
            ("127.0.0.1:0", "127.0.0.1:0", false),
        ];
        for (addr, admin, refused) in cases {
            let got = super::check_admin_apart(a(addr), a(admin)).is_err();
            assert_eq!(got, refused, "{addr} and {admin}");
        }
    }
    /// packaging/hematite.service's LimitMEMLOCK covers what check_memlock
    /// asks of the largest server at the default io memory: the unit must
    /// never make the server refuse to start.
    #[test]
    fn the_systemd_units_memlock_covers_the_startup_check() {
        let unit = include_str!("../../packaging/hematite.service");
        let limit = unit
            .lines()
            .find_map(|l| l.strip_prefix("LimitMEMLOCK="))
            .expect("the unit sets LimitMEMLOCK");
        let bytes: u64 = match limit.strip_suffix('M') {
            Some(mib) => mib.parse::<u64>().unwrap() << 20,
            None => panic!("LimitMEMLOCK={limit}: expected a value in M"),
        };
        let need = super::memlock_needed(256, crate::config::DEFAULT_IO_MEMORY_KIB);
        assert!(
            bytes >= need,
            "LimitMEMLOCK={limit} is below the {need} bytes 256 shards need"
        );
        assert!(unit.contains("LimitNOFILE="), "the unit sets LimitNOFILE");
    }
}
