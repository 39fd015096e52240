//! `gpuswap check --daemon`: deterministic simulation testing of the [`Endpoint`]. One
//! seed makes a case (2-5 processes allocating and freeing chunk multiples in a VRAM
//! too small for them all, so that the manager relocates) and its faults (processes that
//! freeze, processes killed while their suspension or a move is outstanding, refused
//! moves, answers late by a delay drawn from the seed, so that the processes' frames
//! interleave). The processes speak the wire protocol as the interposer does, on a
//! simulated clock; the endpoint's and the manager's invariants are checked after every
//! input, what each process receives is checked against the protocol's rules, and the
//! end of the run against what it must leave. Half the cases take turns (`gpu_time =
//! turns`, a short quantum, or `auto`, half of those demoting idle tenants): their
//! processes say when they are busy and idle, and handovers park and move them in
//! bulk; under `auto` they report progress, some of it late, missing or nonsense. In a
//! quarter of the cases processes also hold memory the daemon cannot move (managed
//! memory that grows and shrinks, buffers pinned for IPC), which the manager must count
//! as they say, whatever turns and idle demotion do. No socket, thread or clock: the same seed
//! always makes the same run.

use std::collections::BTreeMap;

use gpuswap_core::gpu_time::{AutoSettings, GpuTime, Idle, Quantum, TurnSettings};
use gpuswap_core::registry::{ParamKind, find_policy};
use gpuswap_core::{MIB, PolicySettings};
use gpuswap_wire::{ClientMsg, DaemonMsg, PROTOCOL_VERSION};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::backend::check_policy;
use crate::config::DaemonConfig;
use crate::endpoint::{ANSWER_TIMEOUT_NS, ConnId, Endpoint, Input};

/// The processes' user, which is the daemon's.
const UID: u32 = 1000;
const CHUNK_BYTES: u64 = 2 * MIB;
const MS: u64 = 1_000_000;
/// How long a frozen process hangs before it is killed from outside: past the
/// endpoint's answer deadline, so that a frozen process the manager waits on is closed
/// by the endpoint, and one it does not wait on ends by its own death.
const FROZEN_FOR_NS: u64 = 60_000 * MS;
/// Inputs one case may take: a case is a few hundred, so one that reaches this does
/// not terminate.
const MAX_INPUTS: u64 = 200_000;
/// How long the endpoint's timers run on with nothing in flight: past its answer
/// deadline, so a process it waits on is closed, and a process still waiting then
/// waits forever.
const IDLE_LIMIT_NS: u64 = 120_000 * MS;

/// One step of a process's program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Allocate this many chunks (and wait for the answer).
    Alloc(u64),
    /// Free one of the live buffers (drawn at run time), if any.
    Free,
    /// Free every live buffer.
    FreeAll,
    /// Hold this many chunks of managed memory now (the interposer's `Unmovable`).
    Managed(u64),
    /// Pin one of the live buffers (drawn at run time), if any, as an IPC export does:
    /// counted as pinned, then freed from the daemon's movable books.
    Pin,
}

/// A simulated process: when it connects, and what it does.
#[derive(Clone, Debug)]
pub struct Program {
    /// When it connects and says hello.
    pub start_ns: u64,
    /// What it does, each step after a think time; then it exits.
    pub steps: Vec<Step>,
}

/// The faults of a case.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// A process that stops answering (and acting) before its step of this number.
    pub frozen: Option<(usize, usize)>,
    /// Chance a process dies when asked to suspend or to move a chunk.
    pub kill: f64,
    /// Chance a process refuses a move (`RelocateFailed`).
    pub refuse: f64,
    /// The longest delay of a message, either way.
    pub max_delay_ns: u64,
    /// A process that drains its first suspension in longer than the endpoint's answer
    /// deadline (a kernel that runs that long): it is closed, and its answer comes late.
    pub slow: Option<usize>,
}

/// A case: the daemon's memory, its processes and its faults.
#[derive(Clone, Debug)]
pub struct Case {
    /// The seed that makes it (and draws its run's delays and faults).
    pub seed: u64,
    /// The daemon's settings.
    pub config: DaemonConfig,
    /// The processes.
    pub programs: Vec<Program>,
    /// The faults.
    pub faults: Faults,
}

/// What a passed case did (for the summary), summed over cases by [`CheckStats::add`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckStats {
    /// Inputs the endpoint handled (frames, connections, ends and timeouts).
    pub inputs: u64,
    /// Suspensions asked.
    pub suspensions: u64,
    /// Moves asked.
    pub moves: u64,
    /// Moves refused by their process.
    pub refused: u64,
    /// Processes that froze.
    pub frozen: u64,
    /// Processes that drained too slowly, answering after the deadline.
    pub slow: u64,
    /// Frozen or slow processes closed by the endpoint at its answer deadline.
    pub closed_at_deadline: u64,
    /// Processes killed while their suspension or a move was outstanding.
    pub killed_mid_relocation: u64,
    /// Processes the daemon ended (`Kill`) after refused moves.
    pub killed_by_daemon: u64,
    /// Frames that reached the endpoint after a frame another process sent later.
    pub overtaken: u64,
    /// Bulk moves asked (turns' handovers).
    pub batches: u64,
}

impl CheckStats {
    /// Adds another case's figures.
    pub fn add(&mut self, o: &CheckStats) {
        self.inputs += o.inputs;
        self.suspensions += o.suspensions;
        self.moves += o.moves;
        self.refused += o.refused;
        self.frozen += o.frozen;
        self.slow += o.slow;
        self.closed_at_deadline += o.closed_at_deadline;
        self.killed_mid_relocation += o.killed_mid_relocation;
        self.killed_by_daemon += o.killed_by_daemon;
        self.overtaken += o.overtaken;
        self.batches += o.batches;
    }
}

/// The case a seed makes.
pub fn case(seed: u64) -> Case {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = rng.random_range(2..=5usize);
    // VRAM for 4-24 chunks while each process may hold up to 8-chunk buffers: relocations
    // in most cases, refusals in some.
    let vram_chunks = rng.random_range(4..=24u64);
    let host_bytes = if rng.random_bool(0.25) {
        rng.random_range(0..32u64) * CHUNK_BYTES
    } else {
        1 << 40
    };
    let (gpu_time, idle) = gpu_time(seed);
    let mut config = DaemonConfig {
        socket: "unused.sock".into(),
        vram_bytes: Some(vram_chunks * CHUNK_BYTES),
        host_bytes,
        chunk_bytes: CHUNK_BYTES,
        policy: policy(&mut rng),
        return_interval_ns: rng.random_range(1..100u64) * MS,
        verbose: false,
        contracts: Default::default(),
        gpu_time,
        idle,
        socket_group: None,
        metrics_listen: None,
        max_connections: crate::config::DEFAULT_MAX_CONNECTIONS,
        probe_remote: false,
        device_uuid: None,
    };
    let mut programs = (0..n)
        .map(|_| {
            let mut steps: Vec<Step> = (0..rng.random_range(1..30))
                .map(|_| match rng.random_range(0..10) {
                    0..6 => Step::Alloc(rng.random_range(1..=8)),
                    _ => Step::Free,
                })
                .collect();
            if rng.random_bool(0.5) {
                steps.push(Step::FreeAll);
            }
            Program {
                start_ns: rng.random_range(0..10 * MS),
                steps,
            }
        })
        .collect::<Vec<_>>();
    unmovable(seed, &mut programs);
    let frozen = rng.random_bool(0.25).then(|| {
        let p = rng.random_range(0..n);
        (p, rng.random_range(0..=programs[p].steps.len()))
    });
    let faults = Faults {
        frozen,
        kill: [0.0, 0.0, 0.05, 0.2][rng.random_range(0..4)],
        refuse: [0.0, 0.1, 0.4, 0.8][rng.random_range(0..4)],
        max_delay_ns: [0, 1_000, 2 * MS, 40 * MS][rng.random_range(0..4)],
        slow: rng.random_bool(0.1).then(|| rng.random_range(0..n)),
    };
    // Drawn last, so that the other draws make the cases they made before the probe.
    config.probe_remote = rng.random_bool(0.5);
    Case {
        seed,
        config,
        programs,
        faults,
    }
}

/// Memory the daemon cannot move in a quarter of the cases (issue 41): managed memory
/// that grows and shrinks, buffers pinned for IPC, as steps put among the programs'
/// own, drawn from a stream of their own so that the other cases are those they were.
fn unmovable(seed: u64, programs: &mut [Program]) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x554e_4d4f_5645);
    if !rng.random_bool(0.25) {
        return;
    }
    for program in programs {
        for _ in 0..rng.random_range(1..=4) {
            let step = match rng.random_bool(0.5) {
                true => Step::Managed(rng.random_range(0..=4)),
                false => Step::Pin,
            };
            let at = rng.random_range(0..=program.steps.len());
            program.steps.insert(at, step);
        }
    }
}

/// Turns in half the cases (half of those chosen automatically, by progress reports,
/// sometimes with idle demotion), with a quantum and an idle handover short against a
/// case, drawn from a stream of their own so that the other draws make the cases they
/// made before turns existed.
fn gpu_time(seed: u64) -> (GpuTime, Idle) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5455_524e_5321);
    if rng.random_bool(0.5) {
        return (GpuTime::Concurrent, Idle::Keep);
    }
    let turns = TurnSettings {
        quantum: Quantum::Fixed {
            ns: rng.random_range(1..30u64) * MS,
        },
        handover_after_ns: rng.random_range(1..10u64) * MS,
        always: false,
    };
    if rng.random_bool(0.5) {
        return (GpuTime::Turns(turns), Idle::Keep);
    }
    let idle = match rng.random_bool(0.5) {
        true => Idle::Demote {
            after_ns: rng.random_range(1..20u64) * MS,
        },
        false => Idle::Keep,
    };
    let share_first = rng.random_bool(0.5);
    (GpuTime::Auto(AutoSettings { turns, share_first }), idle)
}

/// GPUswap with random parameters among those the daemon can run.
fn policy(rng: &mut ChaCha8Rng) -> PolicySettings {
    let entry = find_policy("gpuswap").expect("registered");
    let mut policy = PolicySettings::named("gpuswap");
    for param in entry.params {
        if let ParamKind::Choice(options) = param.kind {
            let options = options();
            let tried = policy
                .clone()
                .with(param.key, options[rng.random_range(0..options.len())].name);
            if check_policy(&tried).is_ok() {
                policy = tried;
            }
        }
    }
    policy
}

/// The case in one line.
pub fn describe(case: &Case) -> String {
    let c = &case.config;
    let settings: Vec<String> = c
        .policy
        .chosen()
        .iter()
        .map(|(k, v)| format!("{k}={}", v.name))
        .collect();
    let steps: Vec<String> = case
        .programs
        .iter()
        .map(|p| p.steps.len().to_string())
        .collect();
    let f = &case.faults;
    format!(
        "{} ({}, gpu_time {}, idle {}) vram {} MiB host {} MiB, {} processes of {} steps, frozen {}, slow {}, kill {:.2}, refuse {:.2}, answers up to {} us late",
        c.policy.name(),
        settings.join(", "),
        c.gpu_time.name(),
        c.idle.name(),
        c.vram_bytes.unwrap_or(0) / MIB,
        c.host_bytes.min(1 << 40) / MIB,
        case.programs.len(),
        steps.join("/"),
        f.frozen.map_or("none".to_owned(), |(p, s)| format!(
            "process {p} at step {s}"
        )),
        f.slow.map_or("none".to_owned(), |p| format!("process {p}")),
        f.kill,
        f.refuse,
        f.max_delay_ns / 1_000,
    )
}

/// Runs the case of `seed` and checks it: its figures, or what went wrong and when.
pub fn check(seed: u64) -> Result<CheckStats, String> {
    check_case(&case(seed), |_| {})
}

/// Runs `case` on an endpoint `prepare` may alter (the tests' mutations) and checks it.
fn check_case(case: &Case, prepare: impl FnOnce(&mut Endpoint)) -> Result<CheckStats, String> {
    let mut endpoint = Endpoint::new(case.config.clone(), UID);
    prepare(&mut endpoint);
    let mut run = Run::new(case, endpoint);
    run.run()
        .map(|()| run.stats)
        .map_err(|problem| format!("at {:.3} ms: {problem}", run.now_ns as f64 / 1e6))
}

/// What is in flight or due.
#[derive(Debug)]
enum Event {
    /// A frame (or the end) of a process reaches the endpoint; sent at `.1`.
    ToDaemon(Input, u64),
    /// A message of the endpoint reaches process `.0`; `None`: its connection's close.
    ToProcess(usize, Option<DaemonMsg>),
    /// Process `.0` takes its next step.
    Step(usize),
}

/// A process as it sees itself.
#[derive(Debug, Default)]
struct Process {
    /// The next step's index.
    next: usize,
    live: Vec<u64>,
    /// Each live buffer's bytes, as granted.
    sizes: BTreeMap<u64, u64>,
    /// Managed memory and pinned buffers it holds (what it says in `Unmovable`).
    managed_bytes: u64,
    pinned_bytes: u64,
    /// The request it waits for the answer to.
    waiting: Option<u64>,
    /// Answers each request got.
    answers: Vec<u32>,
    /// Between a `Suspend` it took and the `Resume` after it.
    suspended: bool,
    /// It stopped answering and acting.
    frozen: bool,
    /// It answered a suspension after the endpoint's deadline.
    slow: bool,
    /// When a frozen process is killed from outside.
    dies_at_ns: u64,
    /// It sent its end (exit, death), or was told it is killed.
    ended: bool,
    /// Its connection was closed.
    closed: bool,
    /// Under turns (the welcome's idle report): whether it last said it is busy.
    busy: Option<bool>,
    /// Under auto (the welcome's progress report): it reports its progress.
    reports: bool,
}

/// One run: the endpoint, the processes, and the events in flight by time.
struct Run<'a> {
    case: &'a Case,
    endpoint: Endpoint,
    rng: ChaCha8Rng,
    now_ns: u64,
    procs: Vec<Process>,
    /// Events by (time, order of scheduling).
    queue: BTreeMap<(u64, u64), Event>,
    seq: u64,
    /// The latest delivery time of each process's frames and of its messages: a
    /// connection delivers in order, whatever the delays.
    to_daemon_at: Vec<u64>,
    to_process_at: Vec<u64>,
    /// When the latest frame delivered was sent.
    last_sent_ns: u64,
    stats: CheckStats,
}

impl<'a> Run<'a> {
    fn new(case: &'a Case, endpoint: Endpoint) -> Self {
        let n = case.programs.len();
        let mut run = Self {
            case,
            endpoint,
            rng: ChaCha8Rng::seed_from_u64(case.seed ^ 0x4441_454d_4f4e_2121),
            now_ns: 0,
            procs: (0..n).map(|_| Process::default()).collect(),
            queue: BTreeMap::new(),
            seq: 0,
            to_daemon_at: vec![0; n],
            to_process_at: vec![0; n],
            last_sent_ns: 0,
            stats: CheckStats::default(),
        };
        for (p, program) in case.programs.iter().enumerate() {
            let accepted = Input::Accepted {
                conn: p as ConnId,
                pid: 100 + p as u32,
                uid: UID,
                cgroups: Vec::new(),
            };
            run.at(
                program.start_ns,
                Event::ToDaemon(accepted, program.start_ns),
            );
            let hello = ClientMsg::Hello {
                protocol: PROTOCOL_VERSION,
                pid: 100 + p as u32,
                name: format!("p{p}"),
                device_total_bytes: 1 << 30,
                granularity_bytes: CHUNK_BYTES,
                memory_limit_bytes: 0,
                device_uuid: String::new(),
            };
            run.to_daemon_at[p] = program.start_ns;
            run.at(
                program.start_ns,
                Event::ToDaemon(Input::Frame(p as ConnId, hello), program.start_ns),
            );
        }
        run
    }

    fn at(&mut self, at_ns: u64, event: Event) {
        self.queue.insert((at_ns, self.seq), event);
        self.seq += 1;
    }

    fn delay(&mut self) -> u64 {
        match self.case.faults.max_delay_ns {
            0 => 0,
            most => self.rng.random_range(0..=most),
        }
    }

    /// Process `p` sends `input`, which arrives after a delay, after its earlier frames.
    fn send(&mut self, p: usize, input: Input) {
        self.send_late(p, input, 0);
    }

    /// [`Run::send`], `late_ns` later.
    fn send_late(&mut self, p: usize, input: Input, late_ns: u64) {
        let at = (self.now_ns + late_ns + self.delay()).max(self.to_daemon_at[p]);
        self.to_daemon_at[p] = at;
        self.at(at, Event::ToDaemon(input, self.now_ns));
    }

    fn frame(&mut self, p: usize, msg: ClientMsg) {
        self.send(p, Input::Frame(p as ConnId, msg));
    }

    /// Process `p` ends (exit or death): its connection's end reaches the endpoint.
    fn end(&mut self, p: usize, why: &str) {
        self.procs[p].ended = true;
        self.send(p, Input::Gone(p as ConnId, why.into()));
    }

    /// Process `p` takes its next step after a think time.
    fn think(&mut self, p: usize) {
        let at = self.now_ns + self.rng.random_range(0..5 * MS);
        self.at(at, Event::Step(p));
    }

    /// Runs until nothing is in flight, checking after every input, then checks the end.
    fn run(&mut self) -> Result<(), String> {
        let mut idle_since = 0;
        loop {
            let next = self.queue.keys().next().map(|k| k.0);
            let timer = self.endpoint.poll_timeout();
            let live = self.procs.iter().any(|p| !p.closed);
            match (next, timer) {
                (Some(at), Some(t)) if t < at && live => self.timeout(t)?,
                (None, Some(t)) if live && t <= idle_since + IDLE_LIMIT_NS => self.timeout(t)?,
                (Some(_), _) => {
                    let ((at, _), event) = self.queue.pop_first().expect("present");
                    self.now_ns = self.now_ns.max(at);
                    idle_since = self.now_ns;
                    self.event(event)?;
                }
                _ => break,
            }
            if self.stats.inputs > MAX_INPUTS {
                return Err(format!("no end after {MAX_INPUTS} inputs"));
            }
        }
        self.check_end()
    }

    fn timeout(&mut self, at_ns: u64) -> Result<(), String> {
        self.now_ns = self.now_ns.max(at_ns);
        self.stats.inputs += 1;
        self.endpoint.handle_timeout(self.now_ns);
        self.after_input()
    }

    fn event(&mut self, event: Event) -> Result<(), String> {
        match event {
            Event::ToDaemon(input, sent_ns) => {
                if sent_ns < self.last_sent_ns {
                    self.stats.overtaken += 1;
                }
                self.last_sent_ns = sent_ns;
                self.stats.inputs += 1;
                self.endpoint.handle(self.now_ns, input);
                self.after_input()
            }
            Event::ToProcess(p, Some(msg)) => self.receive(p, msg),
            Event::ToProcess(p, None) => self.closed(p),
            Event::Step(p) => {
                self.step(p);
                Ok(())
            }
        }
    }

    /// Checks the invariants and sends what the endpoint polls out on its way.
    fn after_input(&mut self) -> Result<(), String> {
        self.endpoint
            .check_invariants()
            .map_err(|e| format!("invariant broken: {e}"))?;
        while let Some((conn, msg)) = self.endpoint.poll_transmit() {
            self.deliver(conn as usize, Some(msg));
        }
        while let Some(conn) = self.endpoint.poll_close() {
            self.deliver(conn as usize, None);
        }
        while self.endpoint.poll_event().is_some() {}
        Ok(())
    }

    fn deliver(&mut self, p: usize, msg: Option<DaemonMsg>) {
        match &msg {
            Some(DaemonMsg::Suspend) => self.stats.suspensions += 1,
            Some(DaemonMsg::Relocate { .. }) => self.stats.moves += 1,
            _ => {}
        }
        let at = (self.now_ns + self.delay()).max(self.to_process_at[p]);
        self.to_process_at[p] = at;
        self.at(at, Event::ToProcess(p, msg));
    }

    /// Process `p` takes its next step, unless it waits, is suspended, frozen or ended.
    fn step(&mut self, p: usize) {
        let proc = &self.procs[p];
        if proc.suspended && proc.busy == Some(false) && !proc.frozen && !proc.ended {
            // Held at its gate with work to start: it says so, as the interposer does.
            self.procs[p].busy = Some(true);
            self.frame(p, ClientMsg::Busy);
            return;
        }
        if proc.waiting.is_some() || proc.suspended || proc.frozen || proc.ended {
            return;
        }
        if self.case.faults.frozen == Some((p, proc.next)) {
            let at = self.now_ns + FROZEN_FOR_NS;
            self.procs[p].frozen = true;
            self.procs[p].dies_at_ns = at;
            self.stats.frozen += 1;
            self.at(
                at,
                Event::ToDaemon(Input::Gone(p as ConnId, "killed".into()), at),
            );
            return;
        }
        let Some(&step) = self.case.programs[p].steps.get(proc.next) else {
            self.end(p, "disconnected");
            return;
        };
        // Under turns each step is GPU work; now and then the process pauses, idle.
        if let Some(busy) = self.procs[p].busy {
            let now_busy = self.rng.random_bool(0.7);
            if now_busy != busy {
                self.procs[p].busy = Some(now_busy);
                let said = if now_busy {
                    ClientMsg::Busy
                } else {
                    ClientMsg::Idle
                };
                self.frame(p, said);
            }
        }
        if self.procs[p].reports && self.procs[p].busy == Some(true) {
            self.report_progress(p);
        }
        self.procs[p].next += 1;
        match step {
            Step::Alloc(chunks) => {
                let proc = &mut self.procs[p];
                let request = proc.answers.len() as u64;
                proc.answers.push(0);
                proc.waiting = Some(request);
                let bytes = chunks * CHUNK_BYTES;
                self.frame(p, ClientMsg::Alloc { request, bytes });
                return;
            }
            Step::Free if !self.procs[p].live.is_empty() => {
                let live = &mut self.procs[p].live;
                let buffer = live.swap_remove(self.rng.random_range(0..live.len()));
                self.frame(p, ClientMsg::Free { buffer });
            }
            Step::Free => {}
            Step::FreeAll => {
                for buffer in std::mem::take(&mut self.procs[p].live) {
                    self.frame(p, ClientMsg::Free { buffer });
                }
            }
            Step::Managed(chunks) => {
                self.procs[p].managed_bytes = chunks * CHUNK_BYTES;
                self.say_unmovable(p);
            }
            Step::Pin if !self.procs[p].live.is_empty() => {
                let proc = &mut self.procs[p];
                let buffer = proc
                    .live
                    .swap_remove(self.rng.random_range(0..proc.live.len()));
                proc.pinned_bytes += proc.sizes.get(&buffer).copied().unwrap_or(0);
                self.say_unmovable(p);
                self.frame(p, ClientMsg::Free { buffer });
            }
            Step::Pin => {}
        }
        self.think(p);
    }

    /// Process `p` receives `msg` and answers as the interposer would, or as its faults
    /// say; what it receives must follow the protocol.
    /// Process `p` says what it holds that the daemon cannot move.
    fn say_unmovable(&mut self, p: usize) {
        let proc = &self.procs[p];
        let msg = ClientMsg::Unmovable {
            managed_bytes: proc.managed_bytes,
            pinned_bytes: proc.pinned_bytes,
        };
        self.frame(p, msg);
    }

    /// A busy process's progress report: most honest, some missing or late, some
    /// nonsense (no window, absurd counts, buffers not its own), none of which may
    /// starve anyone or break an invariant.
    fn report_progress(&mut self, p: usize) {
        let honest = gpuswap_wire::Progress {
            window_ns: self.rng.random_range(1..200u64) * MS,
            launches: self.rng.random_range(0..1000),
            completed: self.rng.random_range(0..1000),
            completed_blocks: self.rng.random_range(0..100_000),
            touched: self.procs[p].live.clone(),
            ..Default::default()
        };
        match self.rng.random_range(0..10) {
            0..2 => {}
            2 => {
                let late_ns = self.rng.random_range(0..500u64) * MS;
                self.send_late(
                    p,
                    Input::Frame(p as ConnId, ClientMsg::Progress(honest)),
                    late_ns,
                );
            }
            3 => {
                let lie = gpuswap_wire::Progress {
                    window_ns: [0, u64::MAX][self.rng.random_range(0..2)],
                    launches: u64::MAX,
                    blocks: u64::MAX,
                    completed: u64::MAX,
                    completed_blocks: [0, u64::MAX][self.rng.random_range(0..2)],
                    sync_wait_ns: u64::MAX,
                    idle: true,
                    touched: (0..64).map(|_| self.rng.random()).collect(),
                };
                self.frame(p, ClientMsg::Progress(lie));
            }
            _ => self.frame(p, ClientMsg::Progress(honest)),
        }
    }

    fn receive(&mut self, p: usize, msg: DaemonMsg) -> Result<(), String> {
        let proc = &self.procs[p];
        if proc.ended || proc.frozen {
            return Ok(());
        }
        match msg {
            DaemonMsg::Welcome {
                idle_report_ns,
                progress_report_ns,
                probe_remote,
                ..
            } => {
                self.procs[p].busy = (idle_report_ns > 0).then_some(false);
                self.procs[p].reports = progress_report_ns > 0;
                if probe_remote {
                    // Any figure in range, NVLink-C2C's or PCIe's or the extremes (a
                    // lie): the choice it starts from must leave every invariant
                    // standing. No draw, so the case's other draws stay as they were.
                    let remote_cost = [1.0, 9.0, 240.0, 1e6][p % 4];
                    self.frame(p, ClientMsg::RemoteCost { remote_cost });
                }
                self.think(p);
            }
            DaemonMsg::Granted {
                request,
                buffer,
                bytes,
                ..
            } => {
                self.answer(p, request)?;
                self.procs[p].live.push(buffer);
                self.procs[p].sizes.insert(buffer, bytes);
                self.think(p);
            }
            DaemonMsg::AllocFailed { request, .. } => {
                self.answer(p, request)?;
                self.think(p);
            }
            DaemonMsg::Suspend => {
                if proc.suspended {
                    return Err(format!("process {p} asked to suspend while suspended"));
                }
                if self.dies() {
                    self.stats.killed_mid_relocation += 1;
                    self.end(p, "killed while suspending");
                    return Ok(());
                }
                self.procs[p].suspended = true;
                let suspended = Input::Frame(p as ConnId, ClientMsg::Suspended);
                if self.case.faults.slow == Some(p) && !self.procs[p].slow {
                    self.procs[p].slow = true;
                    self.stats.slow += 1;
                    self.send_late(p, suspended, ANSWER_TIMEOUT_NS + 1_000 * MS);
                } else {
                    self.send(p, suspended);
                }
            }
            DaemonMsg::Relocate { copy, buffer, .. } => {
                if !proc.suspended {
                    return Err(format!("process {p} asked to move a chunk while it runs"));
                }
                if !proc.live.contains(&buffer) {
                    return Err(format!(
                        "process {p} asked to move buffer {buffer}, not its own"
                    ));
                }
                if self.dies() {
                    self.stats.killed_mid_relocation += 1;
                    self.end(p, "killed while moving");
                } else if self.case.faults.refuse > 0.0
                    && self.rng.random_bool(self.case.faults.refuse)
                {
                    self.stats.refused += 1;
                    let error = "CUDA_ERROR_OUT_OF_MEMORY".into();
                    self.frame(p, ClientMsg::RelocateFailed { copy, error });
                } else {
                    self.frame(p, ClientMsg::Relocated { copy });
                }
            }
            DaemonMsg::RelocateBatch { batch, moves } => {
                if !proc.suspended {
                    return Err(format!("process {p} asked to move chunks while it runs"));
                }
                if let Some(m) = moves.iter().find(|m| !proc.live.contains(&m.buffer)) {
                    return Err(format!(
                        "process {p} asked to move buffer {}, not its own",
                        m.buffer
                    ));
                }
                if moves.is_empty() || moves.len() > gpuswap_wire::MAX_BATCH_MOVES {
                    return Err(format!(
                        "process {p} asked a bulk move of {} chunks",
                        moves.len()
                    ));
                }
                self.stats.batches += 1;
                self.stats.moves += moves.len() as u64;
                if self.dies() {
                    self.stats.killed_mid_relocation += 1;
                    self.end(p, "killed while moving");
                    return Ok(());
                }
                let refuse = self.case.faults.refuse;
                let failed: Vec<u32> = (0..moves.len() as u32)
                    .filter(|_| refuse > 0.0 && self.rng.random_bool(refuse / 4.0))
                    .collect();
                self.stats.refused += failed.len() as u64;
                let error = if failed.is_empty() {
                    String::new()
                } else {
                    "CUDA_ERROR_OUT_OF_MEMORY".into()
                };
                let answer = ClientMsg::RelocatedBatch {
                    batch,
                    failed,
                    error,
                    elapsed_ns: 1_000_000,
                };
                self.frame(p, answer);
            }
            DaemonMsg::Resume => {
                if !proc.suspended {
                    return Err(format!("process {p} resumed while it runs"));
                }
                self.procs[p].suspended = false;
                self.think(p);
            }
            DaemonMsg::Kill { .. } => {
                self.stats.killed_by_daemon += 1;
                self.procs[p].ended = true;
            }
            other => return Err(format!("process {p} received {other:?}")),
        }
        Ok(())
    }

    /// Whether the process dies of the message it just received.
    fn dies(&mut self) -> bool {
        let kill = self.case.faults.kill;
        kill > 0.0 && self.rng.random_bool(kill)
    }

    /// The answer to `request` reached process `p`: it must be the one it waits for.
    fn answer(&mut self, p: usize, request: u64) -> Result<(), String> {
        let proc = &mut self.procs[p];
        if let Some(n) = proc.answers.get_mut(request as usize) {
            *n += 1;
        }
        if proc.waiting != Some(request) {
            return Err(format!(
                "process {p} got an answer to request {request} while it waits for {:?}",
                proc.waiting
            ));
        }
        proc.waiting = None;
        Ok(())
    }

    /// Process `p`'s connection closed: expected only if it ended, froze, drained too
    /// slowly or was killed.
    fn closed(&mut self, p: usize) -> Result<(), String> {
        let proc = &mut self.procs[p];
        proc.closed = true;
        if (proc.frozen || proc.slow) && !proc.ended {
            if proc.slow || self.now_ns < proc.dies_at_ns {
                self.stats.closed_at_deadline += 1;
            }
            proc.ended = true;
            return Ok(());
        }
        if !proc.ended {
            return Err(format!("process {p}'s connection closed while it runs"));
        }
        Ok(())
    }

    /// Everything is released and no relocation runs once every process has gone;
    /// every allocation was answered once, unless its process ended first.
    fn check_end(&mut self) -> Result<(), String> {
        for (p, proc) in self.procs.iter().enumerate() {
            if !proc.closed {
                let why = match (proc.waiting, proc.suspended) {
                    (Some(r), _) => format!("waits for an answer to request {r}"),
                    (None, true) => "stays suspended".to_owned(),
                    (None, false) => "was never closed".to_owned(),
                };
                return Err(format!("nothing left in flight, and process {p} {why}"));
            }
            if let Some(r) = proc.answers.iter().position(|&n| n > 1) {
                return Err(format!("process {p}'s request {r} was answered twice"));
            }
        }
        if self.endpoint.relocating() {
            return Err("every process has gone, and a relocation still runs".into());
        }
        let snap = self.endpoint.snapshot();
        if !snap.tenants.is_empty() || snap.vram_used_bytes > 0 || snap.host_used_bytes > 0 {
            return Err(format!(
                "every process has gone, and {} tenants hold {} bytes of VRAM and {} of host \
                 memory",
                snap.tenants.len(),
                snap.vram_used_bytes,
                snap.host_used_bytes
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
