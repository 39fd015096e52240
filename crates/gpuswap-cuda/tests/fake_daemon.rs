//! The interposer against a fake daemon that speaks the wire protocol: the stand-in's
//! end-to-end client runs under `LD_PRELOAD`, and the test, as its daemon, grants every
//! allocation in VRAM, then suspends it and moves its chunks, in batches and one by one,
//! or watches its busy and idle reports. The client checks every byte of its buffers
//! after the moves.

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use gpuswap_wire::{
    self as wire, ChunkMove, ClientMsg, DaemonMsg, Location, PROTOCOL_VERSION, Placement,
};

const MIB: u64 = 1 << 20;
const CHUNK_BYTES: u64 = 2 * MIB;

/// The interposer, built for this test's profile (`<profile>/deps/<this test>`).
fn interposer() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    gpuswap_standin::interposer(exe.parent().unwrap().parent().unwrap())
}

/// One test's fake daemon and the client it serves.
struct Fake {
    dir: PathBuf,
    out: UnixStream,
    incoming: Receiver<ClientMsg>,
    client: Option<Child>,
    /// (buffer, bytes) of every grant, in order.
    granted: Vec<(u64, u64)>,
    /// The process the client takes for its daemon, when it is not the test's.
    daemon: Option<ListenerProcess>,
}

impl Fake {
    /// Starts the client with `args` under the interposer and welcomes it with
    /// `idle_report_ns`.
    fn start(name: &str, idle_report_ns: u64, args: &[&str]) -> Fake {
        Self::start_in(name, "2GiB", idle_report_ns, args)
    }

    /// [`Fake::start`] on a stand-in of `vram` (its `GPUSWAP_STANDIN_VRAM`).
    fn start_in(name: &str, vram: &str, idle_report_ns: u64, args: &[&str]) -> Fake {
        Self::start_with(name, vram, idle_report_ns, args, &[], false)
    }

    /// [`Fake::start`] whose daemon, as the client's `SO_PEERCRED` names it, is a child
    /// process of the test's ([`Fake::daemon`]), to stop or kill while the test goes on
    /// answering, or not, on the socket; the client's `GPUSWAP_DAEMON_TIMEOUT` is
    /// `timeout`.
    fn watched(name: &str, timeout: &str, args: &[&str]) -> Fake {
        let env = [("GPUSWAP_DAEMON_TIMEOUT", timeout)];
        Self::start_with(name, "2GiB", 0, args, &env, true)
    }

    /// [`Fake::start_in`] with the client's environment `env` added, and with
    /// `own_process`, [`Fake::watched`]'s daemon process.
    fn start_with(
        name: &str,
        vram: &str,
        idle_report_ns: u64,
        args: &[&str],
        env: &[(&str, &str)],
        own_process: bool,
    ) -> Fake {
        let dir = std::env::temp_dir().join(format!("gpuswap-fake-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("d.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let mut client = under_interposer(&dir, vram, args);
        client.env("GPUSWAP_TRACE", "1").envs(env.iter().copied());
        let daemon = own_process.then(|| ListenerProcess::start(&listener, None, None));
        let client = client.spawn().unwrap();
        let (mut stream, _) = listener.accept().unwrap();
        let hello: ClientMsg = wire::read_frame(&mut stream).unwrap();
        assert!(
            matches!(hello, ClientMsg::Hello { protocol, .. } if protocol == PROTOCOL_VERSION),
            "{hello:?}"
        );
        let welcome = DaemonMsg::Welcome {
            protocol: PROTOCOL_VERSION,
            tenant: 1,
            chunk_bytes: CHUNK_BYTES,
            vram_bytes: 2048 * MIB,
            idle_report_ns,
            progress_report_ns: 0,
            vram_limit_bytes: 0,
            probe_remote: false,
        };
        wire::write_frame(&mut stream, &welcome).unwrap();
        let (tx, incoming) = std::sync::mpsc::channel();
        let mut input = stream.try_clone().unwrap();
        std::thread::spawn(move || {
            while let Ok(msg) = wire::read_frame::<ClientMsg>(&mut input) {
                // The device's memory is reported every second: no test here reads it.
                if matches!(msg, ClientMsg::DeviceMemory { .. }) {
                    continue;
                }
                if tx.send(msg).is_err() {
                    return;
                }
            }
        });
        Fake {
            dir,
            out: stream,
            incoming,
            client: Some(client),
            granted: Vec::new(),
            daemon,
        }
    }

    /// A client of one buffer of `size` (and its scratch), granted, filled and
    /// suspended on a stand-in of `vram`, with `env` added to its environment; returns
    /// it and the buffer's id.
    fn one_buffer_suspended(
        name: &str,
        vram: &str,
        size: &str,
        env: &[(&str, &str)],
    ) -> (Fake, u64) {
        let args = [
            "--buffers",
            "1",
            "--size",
            size,
            "--rounds",
            "2",
            "--hold-ms",
            "300",
        ];
        let mut fake = Self::start_with(name, vram, 0, &args, env, false);
        // The buffer, filled, then the client's scratch buffer.
        fake.grant_until(2);
        let data = fake.granted[0].0;
        fake.suspend();
        (fake, data)
    }

    fn send(&mut self, msg: &DaemonMsg) {
        wire::write_frame(&mut self.out, msg).unwrap();
    }

    /// The client's next message other than an allocation (those are granted in VRAM
    /// and frees noted as they come); `None` after `wait` without one.
    fn next_within(&mut self, wait: Duration) -> Option<ClientMsg> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.incoming.recv_timeout(left) {
                Ok(ClientMsg::Alloc { request, bytes }) => self.grant(request, bytes),
                Ok(ClientMsg::Free { .. }) => {}
                Ok(msg) => return Some(msg),
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => {
                    let out = self.client.take().unwrap().wait_with_output().unwrap();
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    panic!("the client hung up ({}): {stderr}", out.status)
                }
            }
        }
    }

    /// Grants an allocation in VRAM.
    fn grant(&mut self, request: u64, bytes: u64) {
        let buffer = self.granted.len() as u64 + 1;
        self.granted.push((buffer, bytes));
        let chunks = bytes.div_ceil(CHUNK_BYTES) as u32;
        self.send(&DaemonMsg::Granted {
            request,
            buffer,
            bytes,
            chunk_bytes: CHUNK_BYTES,
            placement: vec![Placement {
                chunks,
                location: Location::Vram,
            }],
        });
    }

    /// The client's next message other than an allocation, within a minute.
    fn next(&mut self) -> ClientMsg {
        self.next_within(Duration::from_secs(60))
            .expect("the client said nothing for a minute")
    }

    /// Serves allocations until `n` are granted.
    fn grant_until(&mut self, n: usize) {
        // Returns at the last grant: the client may be done and gone a moment later,
        // which waiting on for more would take for a hang-up.
        while self.granted.len() < n {
            match self.incoming.recv_timeout(Duration::from_secs(60)) {
                Ok(ClientMsg::Alloc { request, bytes }) => self.grant(request, bytes),
                Ok(ClientMsg::Free { .. } | ClientMsg::Busy | ClientMsg::Idle) => {}
                Ok(msg) => panic!("expected an allocation, got {msg:?}"),
                Err(e) => panic!("no {n} allocations: {e}"),
            }
        }
    }

    /// Suspends the client and waits for its answer.
    fn suspend(&mut self) {
        self.send(&DaemonMsg::Suspend);
        assert_eq!(self.next(), ClientMsg::Suspended);
    }

    /// One batch; returns the answer's (failed, error, elapsed_ns).
    fn batch(&mut self, batch: u64, moves: Vec<ChunkMove>) -> (Vec<u32>, String, u64) {
        self.send(&DaemonMsg::RelocateBatch { batch, moves });
        match self.next() {
            ClientMsg::RelocatedBatch {
                batch: answered,
                failed,
                error,
                elapsed_ns,
            } => {
                assert_eq!(answered, batch);
                (failed, error, elapsed_ns)
            }
            other => panic!("answered a batch with {other:?}"),
        }
    }

    /// The client's output, after checking that it verified every byte.
    fn finish(&mut self) -> String {
        let out = self.client.take().unwrap().wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "the client failed: {stderr}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["ok"], true, "{json}");
        stderr
    }
}

/// The stand-in's client with `args` under the interposer, its daemon's socket
/// `dir/d.sock`, on a stand-in of `vram` of its own (`dir`'s shared-memory table).
fn under_interposer(dir: &Path, vram: &str, args: &[&str]) -> Command {
    let mut c = Command::new(gpuswap_standin::client());
    c.args(args)
        .env("LD_LIBRARY_PATH", gpuswap_standin::dir())
        .env("LD_PRELOAD", interposer())
        .env("GPUSWAP_SOCKET", dir.join("d.sock"))
        .env("GPUSWAP_STANDIN_VRAM", vram)
        .env("GPUSWAP_STANDIN_SHM", shm_name(dir))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn shm_name(dir: &Path) -> String {
    format!("/{}", dir.file_name().unwrap().to_string_lossy())
}

impl Drop for Fake {
    fn drop(&mut self) {
        if let Some(mut client) = self.client.take() {
            let _ = client.kill();
            let _ = client.wait();
        }
        let _ = std::fs::remove_file(format!("/dev/shm{}", shm_name(&self.dir)));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn all_chunks(buffer: u64, chunks: u32, to: Location) -> Vec<ChunkMove> {
    (0..chunks)
        .map(|chunk| ChunkMove { buffer, chunk, to })
        .collect()
}

fn gb_per_s(bytes: u64, ns: u64) -> f64 {
    bytes as f64 / ns.max(1) as f64
}

#[test]
fn a_256_chunk_batch_moves_byte_for_byte_and_single_moves_still_work() {
    const CHUNKS: u32 = 256;
    let bytes = u64::from(CHUNKS) * CHUNK_BYTES;
    let size = format!("{}MiB", bytes / MIB);
    let (mut fake, data) = Fake::one_buffer_suspended("batch", "2GiB", &size, &[]);

    let (failed, error, out_ns) = fake.batch(1, all_chunks(data, CHUNKS, Location::Host));
    assert_eq!((failed.as_slice(), error.as_str()), (&[][..], ""));
    let (failed, _, in_ns) = fake.batch(2, all_chunks(data, CHUNKS, Location::Vram));
    assert!(failed.is_empty(), "{failed:?}");

    // The same bytes one chunk per command, each answered before the next.
    let mut singles_ns = [0u64; 2];
    for (copy, to) in [Location::Host, Location::Vram].into_iter().enumerate() {
        let started = Instant::now();
        for chunk in 0..CHUNKS {
            let copy = copy as u64 * 1000 + u64::from(chunk);
            fake.send(&DaemonMsg::Relocate {
                copy,
                buffer: data,
                chunk,
                to,
            });
            assert_eq!(fake.next(), ClientMsg::Relocated { copy });
        }
        singles_ns[to as usize] = started.elapsed().as_nanos() as u64;
    }
    // Batches again, their host memory now ready in the pool as the singles' was.
    let (failed, _, warm_out_ns) = fake.batch(3, all_chunks(data, CHUNKS, Location::Host));
    assert!(failed.is_empty(), "{failed:?}");
    let (failed, _, warm_in_ns) = fake.batch(4, all_chunks(data, CHUNKS, Location::Vram));
    assert!(failed.is_empty(), "{failed:?}");

    // A batch with a move of no buffer and a second move of one chunk: those two fail,
    // the rest moves, and a chunk that failed stays readable where it was.
    let moves = vec![
        ChunkMove {
            buffer: data,
            chunk: 0,
            to: Location::Host,
        },
        ChunkMove {
            buffer: 999,
            chunk: 0,
            to: Location::Host,
        },
        ChunkMove {
            buffer: data,
            chunk: 0,
            to: Location::Vram,
        },
        ChunkMove {
            buffer: data,
            chunk: 1,
            to: Location::Host,
        },
    ];
    let (failed, error, _) = fake.batch(5, moves);
    assert_eq!(failed, [1, 2]);
    assert!(error.contains("no buffer 999"), "{error}");
    fake.send(&DaemonMsg::Resume);

    let stderr = fake.finish();
    eprintln!(
        "stand-in, {CHUNKS} chunks of 2 MiB: batch to host {:.2} GB/s (host memory \
         created), {:.2} GB/s (from the pool), to VRAM {:.2} and {:.2} GB/s; single moves \
         to host {:.2} GB/s, to VRAM {:.2} GB/s (command to answer, in all)",
        gb_per_s(bytes, out_ns),
        gb_per_s(bytes, warm_out_ns),
        gb_per_s(bytes, in_ns),
        gb_per_s(bytes, warm_in_ns),
        gb_per_s(bytes, singles_ns[Location::Host as usize]),
        gb_per_s(bytes, singles_ns[Location::Vram as usize]),
    );
    let trace = |prefix: &str| {
        stderr
            .lines()
            .find_map(|l| l.split(prefix).nth(1).map(str::to_owned))
            .unwrap_or_else(|| panic!("no {prefix:?} in the trace: {stderr}"))
    };
    eprintln!("trace: batches to Host: {}", trace("batches to Host: "));
    eprintln!("trace: batches to Vram: {}", trace("batches to Vram: "));
    // Batches 1, 3 and 5 out, 2 and 4 in; the single moves are not batches.
    assert!(trace("batches to Host: ").starts_with("3, "), "{stderr}");
    assert!(
        trace("batches to Vram: ").starts_with(&format!("2, {} bytes", 2 * bytes)),
        "{stderr}"
    );
    // Every move's host memory after the first batch's came back from the pool.
    let to_host = 3 * CHUNKS + 2;
    assert!(trace("moves to Host: ").starts_with(&format!("{to_host} chunks")));
    assert!(
        trace("host memory for ").starts_with(&format!("{} of {to_host}", to_host - CHUNKS)),
        "{stderr}"
    );
}

#[test]
fn busy_is_said_at_the_first_work_even_at_a_closed_gate_and_idle_after_quiet() {
    // 100 ms without work is idle; the client sleeps 1.5 s before each of its rounds.
    let mut fake = Fake::start(
        "demand",
        100_000_000,
        &[
            "--buffers",
            "2",
            "--size",
            "4MiB",
            "--rounds",
            "2",
            "--hold-ms",
            "1500",
        ],
    );
    // Filling the buffers is the first work: busy, then idle in the first sleep.
    assert_eq!(fake.next(), ClientMsg::Busy);
    assert_eq!(fake.next(), ClientMsg::Idle);
    assert_eq!(fake.granted.len(), 2 + 1);
    // Held while it sleeps: its next launch says busy, though it waits at its gate, and
    // it does not say idle while it waits there.
    fake.suspend();
    assert_eq!(fake.next(), ClientMsg::Busy);
    assert_eq!(fake.next_within(Duration::from_millis(500)), None);
    fake.send(&DaemonMsg::Resume);
    assert_eq!(fake.next(), ClientMsg::Idle);
    assert_eq!(fake.next(), ClientMsg::Busy);
    fake.finish();
}

#[test]
fn without_turns_the_client_says_neither_busy_nor_idle() {
    let mut fake = Fake::start(
        "no-demand",
        0,
        &[
            "--buffers",
            "1",
            "--size",
            "4MiB",
            "--rounds",
            "1",
            "--hold-ms",
            "1500",
        ],
    );
    fake.grant_until(2);
    assert_eq!(fake.next_within(Duration::from_millis(800)), None);
    fake.finish();
}

#[test]
fn moves_that_find_no_vram_stay_in_host_memory_and_the_rest_come_back() {
    // 16 chunks of 2 MiB and a 2 MiB scratch on a stand-in of 48 MiB.
    let (mut fake, data) = Fake::one_buffer_suspended("no-vram", "48MiB", "32MiB", &[]);
    let (failed, _, _) = fake.batch(1, all_chunks(data, 16, Location::Host));
    assert!(failed.is_empty(), "{failed:?}");
    // Another process takes 42 (40 and its 2 MiB scratch) of the 46 MiB of VRAM left:
    // two chunks fit back.
    let mut hog = Command::new(gpuswap_standin::client())
        .args([
            "--buffers",
            "1",
            "--size",
            "40MiB",
            "--rounds",
            "1",
            "--hold-ms",
            "5000",
        ])
        .env("LD_LIBRARY_PATH", gpuswap_standin::dir())
        .env("GPUSWAP_STANDIN_VRAM", "48MiB")
        .env("GPUSWAP_STANDIN_SHM", shm_name(&fake.dir))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let progress = std::io::BufRead::lines(std::io::BufReader::new(hog.stderr.take().unwrap()));
    for line in progress {
        if line.unwrap().contains("allocated") {
            break;
        }
    }
    let (failed, error, _) = fake.batch(2, all_chunks(data, 16, Location::Vram));
    assert_eq!(failed, (2..16).collect::<Vec<u32>>());
    assert!(
        error.contains("cuMemCreate") && error.contains("Vram"),
        "{error}"
    );
    fake.send(&DaemonMsg::Resume);
    // The client reads every chunk where the batch left it, moved or not.
    fake.finish();
    let _ = hog.kill();
    let _ = hog.wait();
}

/// A child process listening on a socket the test bound: the process a client's
/// `SO_PEERCRED` names as its daemon (the kernel records the credentials of a
/// socket's last `listen`). Killed when dropped.
struct ListenerProcess {
    pid: libc::pid_t,
}

impl ListenerProcess {
    /// Listens on `listener` in a child, as `uid` if given; with `answer`, the child
    /// accepts every connection, reads its hello and writes `answer`; without, it
    /// accepts nothing and leaves the connections to the test.
    fn start(listener: &UnixListener, uid: Option<u32>, answer: Option<Vec<u8>>) -> Self {
        let fd = std::os::fd::AsRawFd::as_raw_fd(listener);
        // The child says on `listened` that it listens: no client may connect before.
        let mut listened = [0; 2];
        // SAFETY: room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(listened.as_mut_ptr()) }, 0);
        // SAFETY: the child makes system calls only (another thread of the test may
        // hold a lock the child would never see released) and never returns.
        match unsafe { libc::fork() } {
            0 => unsafe {
                let took = uid.is_none_or(|uid| libc::setgid(uid) == 0 && libc::setuid(uid) == 0);
                if !took || libc::listen(fd, 16) != 0 {
                    libc::_exit(1);
                }
                libc::write(listened[1], [1u8].as_ptr().cast(), 1);
                loop {
                    let Some(answer) = &answer else {
                        libc::pause();
                        continue;
                    };
                    let conn = libc::accept(fd, std::ptr::null_mut(), std::ptr::null_mut());
                    if conn >= 0 {
                        // The hello first: a client's write must not find the socket shut.
                        let mut hello = [0u8; 4096];
                        libc::read(conn, hello.as_mut_ptr().cast(), hello.len());
                        libc::write(conn, answer.as_ptr().cast(), answer.len());
                        libc::close(conn);
                    }
                }
            },
            pid => {
                assert!(pid > 0, "fork failed");
                let mut said = [0u8];
                // SAFETY: reads one byte into `said`, then closes both ends once.
                let read = unsafe {
                    let read = libc::read(listened[0], said.as_mut_ptr().cast(), 1);
                    libc::close(listened[0]);
                    libc::close(listened[1]);
                    read
                };
                assert_eq!(read, 1, "the listening child failed");
                ListenerProcess { pid }
            }
        }
    }

    /// Sends the process `signal`.
    fn signal(&self, signal: libc::c_int) {
        // SAFETY: our own child.
        unsafe { libc::kill(self.pid, signal) };
    }
}

impl Drop for ListenerProcess {
    fn drop(&mut self) {
        // SAFETY: our own child, killed and reaped once.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// A process of another user listening on `path`: a squatter, or a daemon run as a
/// service user. It answers every connection with `Refused`, which tells a client
/// that trusted it; `None` when this test cannot take another uid (it does not run as
/// root).
fn squat(path: &Path, uid: u32) -> Option<ListenerProcess> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let listener = UnixListener::bind(path).unwrap();
    let mut refusal = Vec::new();
    let said = DaemonMsg::Refused {
        reason: "the squatter answered".into(),
    };
    wire::write_frame(&mut refusal, &said).unwrap();
    Some(ListenerProcess::start(&listener, Some(uid), Some(refusal)))
}

#[test]
fn a_socket_of_another_user_is_refused_unless_named_as_the_daemon_user() {
    let dir = std::env::temp_dir().join(format!("gpuswap-fake-{}-squat", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // nobody, as in /etc/passwd.
    let Some(_squatter) = squat(&dir.join("d.sock"), 65534) else {
        eprintln!("skipped: taking another uid needs root");
        return;
    };
    let run = |daemon_user: Option<&str>| {
        let mut client = under_interposer(&dir, "64MiB", &["--buffers", "1", "--rounds", "1"]);
        if let Some(user) = daemon_user {
            client.env("GPUSWAP_DAEMON_USER", user);
        }
        let out = client.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stderr)
    };
    // Another user's socket: refused before the process says who it is.
    let (code, stderr) = run(None);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("uid 65534") && stderr.contains("GPUSWAP_DAEMON_USER"),
        "{stderr}"
    );
    assert!(!stderr.contains("squatter"), "it said hello: {stderr}");
    // The daemon user an operator names, by uid or name, is trusted.
    for user in ["65534", "nobody"] {
        let (code, stderr) = run(Some(user));
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains("the squatter answered"), "{user}: {stderr}");
    }
    let (_, stderr) = run(Some("no-such-user-of-gpuswap"));
    assert!(
        stderr.contains("GPUSWAP_DAEMON_USER=\"no-such-user-of-gpuswap\""),
        "{stderr}"
    );
    let _ = std::fs::remove_file(format!("/dev/shm{}", shm_name(&dir)));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The first allocation's request and size, unanswered.
fn first_alloc(fake: &Fake) -> (u64, u64) {
    match fake.incoming.recv_timeout(Duration::from_secs(60)) {
        Ok(ClientMsg::Alloc { request, bytes }) => (request, bytes),
        other => panic!("expected an allocation, got {other:?}"),
    }
}

#[test]
fn a_daemon_that_lives_is_waited_for_however_long_it_takes_to_answer() {
    let args = ["--buffers", "1", "--size", "4MiB", "--rounds", "1"];
    let mut fake = Fake::watched("silent-alive", "300ms", &args);
    let (request, bytes) = first_alloc(&fake);
    // Deciding, or waiting for another tenant's relocation: alive, so the wait goes on
    // past the timeout many times over.
    std::thread::sleep(Duration::from_millis(1500));
    let client = fake.client.as_mut().unwrap();
    assert!(client.try_wait().unwrap().is_none(), "the client gave up");
    fake.grant(request, bytes);
    fake.grant_until(2);
    let stderr = fake.finish();
    assert!(!stderr.contains("lost the gpuswap daemon"), "{stderr}");
}

#[test]
fn a_daemon_stopped_or_gone_is_given_up_after_the_timeout() {
    let args = ["--buffers", "1", "--size", "4MiB", "--rounds", "1"];
    for (name, signal, state) in [
        ("silent-stopped", libc::SIGSTOP, "stopped"),
        ("silent-gone", libc::SIGKILL, "ended"),
    ] {
        let mut fake = Fake::watched(name, "300ms", &args);
        first_alloc(&fake);
        // Its socket stays open (the test holds it): only its process tells.
        fake.daemon.as_ref().unwrap().signal(signal);
        let started = Instant::now();
        let client = fake.client.as_mut().unwrap();
        while client.try_wait().unwrap().is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{name}: the client still waits for a daemon {state}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = fake.client.take().unwrap().wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The waiting allocation fails; the program could go on unmanaged.
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains("lost the gpuswap daemon") && stderr.contains(state),
            "{name}: {stderr}"
        );
    }
}

#[test]
fn a_host_pool_beyond_the_daemons_vram_is_cut_to_it_with_a_warning() {
    // 1 TiB of pinned host memory would take the machine's; the daemon's VRAM (2 GiB
    // here) is the most of the process's data that goes to host memory.
    let env = [("GPUSWAP_HOST_POOL", "1TiB")];
    let (mut fake, data) = Fake::one_buffer_suspended("pool-bound", "2GiB", "4MiB", &env);
    let (failed, _, _) = fake.batch(1, all_chunks(data, 2, Location::Host));
    assert!(failed.is_empty(), "{failed:?}");
    fake.send(&DaemonMsg::Resume);
    let stderr = fake.finish();
    assert!(
        stderr.contains("GPUSWAP_HOST_POOL asks for 1024.0 GiB of pinned host memory"),
        "{stderr}"
    );
    let most_mib: u64 = stderr
        .split("came from the pool (at most ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no pool line in the trace: {stderr}"));
    assert!(most_mib <= 2048, "{stderr}");
}

#[test]
fn an_allocation_too_large_to_round_says_why_and_is_out_of_memory() {
    let mut fake = Fake::start("too-large", 0, &["--try-alloc", "18446744073709551615"]);
    let out = fake.client.take().unwrap().wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "18446744073709551615 bytes cannot be rounded up to the allocation granularity"
        ) && stderr.contains("CUDA_ERROR_OUT_OF_MEMORY"),
        "{stderr}"
    );
}

#[test]
fn a_driver_without_cuinit_is_named_plainly() {
    let dir = std::env::temp_dir().join(format!("gpuswap-fake-{}-no-driver", std::process::id()));
    let out = under_interposer(&dir, "64MiB", &["--buffers", "1"])
        .env("GPUSWAP_REAL_LIBCUDA", "/bin/ls")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("the CUDA driver library /bin/ls has no cuInit") && !stderr.contains("c\""),
        "{stderr}"
    );
}
