//! The daemon as a sans-IO endpoint (the shape of quinn-proto's `Endpoint`), the second
//! driver of `gpuswap_core::Manager` beside the simulator's engine: connections become
//! tenants, their messages become the manager's events, the manager's actions become
//! messages to the processes that carry them out. Time comes in as an argument and
//! everything that leaves is polled out (what to send, whom to close, what to log), so
//! the endpoint owns no socket, thread or clock: `crate::serve` supplies those, and
//! tests drive it with a fake clock.

use std::collections::{BTreeMap, VecDeque};

use gpuswap_core::{
    Action, AllocError, AllocRequest, BufferId, BufferKind, Contract, CopyId, Dma, Execution,
    Manager, ManagerConfig, Mapping, Reply, RequestId, TenantId,
};
use gpuswap_wire::{self as wire, ClientMsg, DaemonMsg, PROTOCOL_VERSION};

use crate::claims;
use crate::config::DaemonConfig;
use crate::held::{self, Held};
use crate::identity::{Claim, Peer, ProcessContract};

/// How long a process may take to drain for a suspension or to move one chunk.
pub(crate) const ANSWER_TIMEOUT_NS: u64 = 30_000_000_000;

/// How long a new connection may take to send its first frame (a hello, or an
/// observer's request): a process says hello as it connects, so only a stuck or hostile
/// peer reaches it, and closing it frees its place under `--max-connections`.
pub(crate) const HELLO_TIMEOUT_NS: u64 = 10_000_000_000;

/// Under turns, how long a process starts no GPU work before it says it is idle: long
/// against the CPU gaps inside a training step, short against the 2 s after which an
/// idle holder hands over. A design choice.
pub(crate) const IDLE_REPORT_NS: u64 = 100_000_000;

/// Under `gpu_time = auto`, how often a busy process reports its progress: 100 ms
/// (issue 40: 50-100 ms), ten windows a second for the choice to read, a message a
/// window whatever the launch rate.
pub(crate) const PROGRESS_REPORT_NS: u64 = 100_000_000;

/// The largest remote-read cost a tenant may report: a link a million times slower than
/// VRAM is a broken measurement, not a link.
const MAX_REMOTE_COST: f64 = 1e6;

/// An allocation answered after waiting this long is logged: long against a
/// relocation of a few chunks, short against what a user notices.
const LOGGED_WAIT_NS: u64 = 100_000_000;

/// Bulk moves a snapshot lists.
const BATCHES_SHOWN: usize = 16;

/// A connection's number, unique for the daemon's life.
pub type ConnId = u64;

/// What the socket threads hand the endpoint.
#[derive(Debug)]
pub enum Input {
    /// A new connection, and its peer's pid, uid and cgroups.
    Accepted {
        /// Its number.
        conn: ConnId,
        /// The peer's process.
        pid: u32,
        /// The peer's user.
        uid: u32,
        /// The peer's cgroup paths (`identity::cgroups_of`), which contracts bound to
        /// a cgroup ask for.
        cgroups: Vec<String>,
    },
    /// A frame arrived.
    Frame(ConnId, ClientMsg),
    /// The connection sent a frame that is no message of the protocol (or too long
    /// to be one), and why: it is answered with `Refused`, then closed.
    Unreadable(ConnId, String),
    /// The connection ended or could not be written to.
    Gone(ConnId, String),
    /// A process whose memory is counted as held ([`Endpoint::held_pids`]) exited.
    Exited(u32),
}

/// What the daemon reports as it goes, for the serve loop to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointEvent {
    /// A line of the daemon's log (connections, refusals, exits with their figures)
    /// at its level; only when the daemon is verbose.
    Log(Level, String),
}

/// How much a log line matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// What happened: connections, exits, waits, switches.
    Info,
    /// What an operator should look at: refusals, protocol errors, processes ended or
    /// closed by the daemon.
    Warn,
}

/// One connection.
struct Conn {
    pid: u32,
    /// Who the kernel says it is: what decides the contract it may take.
    peer: Peer,
    name: String,
    /// The device's allocation granularity, from the hello: allocations are rounded up
    /// to it, as the process maps them.
    granularity_bytes: u64,
    tenant: Option<TenantId>,
    suspended: bool,
    /// Allocations waiting for an answer: the core's request number, the client's, and
    /// when it was asked.
    pending: Vec<(RequestId, u64, u64)>,
    relocations: u64,
    waits: u64,
    wait_ns: u64,
    /// When the outstanding suspension was asked for.
    suspend_sent: Option<u64>,
    relocation_ns: u64,
    suspensions: u64,
    drain_ns: u64,
    /// Under turns: whether it last said it is busy.
    busy: bool,
    /// When its last progress report came (or it connected, or last said busy after
    /// idle): its next report's window is at most the time since.
    last_progress_ns: u64,
    /// What it last said it holds that the daemon cannot move (`Unmovable`).
    managed_bytes: u64,
    pinned_bytes: u64,
}

/// The endpoint: the manager, the connections, and what waits to be polled out.
pub struct Endpoint {
    config: DaemonConfig,
    /// The daemon's own user: only its processes are served.
    euid: u32,
    /// Built at the first tenant's hello when the VRAM size is taken from its device.
    manager: Option<Manager>,
    /// The time of the latest input, in ns since the daemon started.
    now_ns: u64,
    conns: BTreeMap<ConnId, Conn>,
    /// The connection of each tenant number; `None` when the number is free.
    tenants: Vec<Option<ConnId>>,
    /// Buffers mapped and not yet granted, with their placement. The core's `Map` comes
    /// right before its `Grant`, so this is empty between events, when connections close.
    mapped: BTreeMap<BufferId, (u64, u64, Vec<wire::Location>)>,
    next_request: u64,
    served: u64,
    /// The books' version, which a snapshot carries: tenants' frames, tenants' ends and
    /// the manager's timeouts count, observers do not (so a metrics scrape and a `top`
    /// of the same moment show the same generation).
    generation: u64,
    /// Connections refused, by the kind of reason (`user`, `connections`, `no_hello`,
    /// `hello`, `contract`, `protocol`).
    refusals: BTreeMap<&'static str, u64>,
    /// Allocations answered `AllocFailed`.
    allocations_failed: u64,
    /// Contract claims refused (the process runs under the default).
    claims_refused: u64,
    /// The outstanding relocation copy, its tenant (only that tenant may answer it) and
    /// when it was asked for.
    copy: Option<(CopyId, TenantId, u64)>,
    /// The outstanding bulk move's figures, for its row once answered.
    batch: Option<wire::BatchRow>,
    /// The latest bulk moves, oldest first.
    batches: VecDeque<wire::BatchRow>,
    batch_moved_bytes: u64,
    /// The tenant the manager waits on (to drain or to copy) and since when: one that
    /// does not answer within [`ANSWER_TIMEOUT_NS`] is closed, so that one frozen process
    /// cannot stall every allocation.
    awaiting: Option<(ConnId, u64)>,
    /// Connections that have not sent their first frame yet, by when they were
    /// accepted, oldest first; entries of connections that since did are dropped when
    /// they come first.
    greeting: VecDeque<(u64, ConnId)>,
    /// Connections to close once the current event's actions are carried out.
    dying: Vec<(ConnId, String)>,
    /// Messages to send, in order, for [`Endpoint::poll_transmit`].
    transmits: VecDeque<(ConnId, DaemonMsg)>,
    /// Connections closed, for [`Endpoint::poll_close`] (after their last transmits).
    closes: VecDeque<ConnId>,
    /// What happened, for [`Endpoint::poll_event`].
    events: VecDeque<EndpointEvent>,
    /// Memory held outside the books.
    held: Held,
    /// How long moves took, each from its command to its answer.
    move_latency: wire::LatencyHistogram,
    /// The allocation the current input asked for, until the input's actions are
    /// carried out: one still unanswered then is logged as waiting.
    asked: Option<(TenantId, RequestId, u64)>,
    /// Whether tenants are still asked to measure the link's remote-read cost
    /// (`Welcome::probe_remote`): from the start under `--set probe_remote`'s default,
    /// until the first answer.
    probe_remote: bool,
    /// A deliberate bug, for the tests that show `gpuswap check --daemon` catches one.
    #[cfg(test)]
    pub(crate) mutation: Option<Mutation>,
}

/// A deliberate bug of the endpoint that `gpuswap check --daemon` must catch.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mutation {
    /// A victim is resumed as soon as it has drained, while its chunks still move: it
    /// runs beside the tenant the relocation makes room for.
    ResumeEarly,
    /// A grant that waited for a relocation is never sent.
    DropLateGrant,
    /// A resumed tenant is still counted suspended (what `gpuswap top` shows).
    KeepSuspended,
    /// A parked tenant that says it is busy is resumed: it runs beside the holder.
    ResumeOnBusy,
}

impl Endpoint {
    /// An endpoint with no tenant serving the processes of user `euid`; the manager is
    /// built now if the VRAM size is known.
    pub fn new(config: DaemonConfig, euid: u32) -> Self {
        let manager = config.vram_bytes.map(|v| manager(&config, v));
        let probe_remote = config.probe_remote;
        Self {
            config,
            euid,
            manager,
            now_ns: 0,
            conns: BTreeMap::new(),
            tenants: Vec::new(),
            mapped: BTreeMap::new(),
            next_request: 0,
            served: 0,
            generation: 0,
            refusals: BTreeMap::new(),
            allocations_failed: 0,
            claims_refused: 0,
            copy: None,
            batch: None,
            batches: VecDeque::new(),
            batch_moved_bytes: 0,
            awaiting: None,
            greeting: VecDeque::new(),
            dying: Vec::new(),
            transmits: VecDeque::new(),
            closes: VecDeque::new(),
            events: VecDeque::new(),
            held: Held::default(),
            asked: None,
            move_latency: wire::LatencyHistogram::default(),
            probe_remote,
            #[cfg(test)]
            mutation: None,
        }
    }

    /// Replaces the contracts read from `--contracts-dir` with `tables` (the serve
    /// loop read it again): processes that connect from now on get them; those
    /// connected keep the contract they have.
    pub fn set_dir_contracts(&mut self, tables: Vec<ProcessContract>) {
        self.config.contracts.set_dir_tables(tables);
    }

    /// The earliest time (ns since the daemon started) at which the endpoint wants
    /// [`Endpoint::handle_timeout`]: the manager's timer, the deadline of the answer
    /// it waits for, or the oldest connection's hello deadline.
    pub fn poll_timeout(&self) -> Option<u64> {
        let timer = self.manager.as_ref().and_then(Manager::poll_timeout);
        let deadline = self
            .awaiting
            .map(|(_, since)| since.saturating_add(ANSWER_TIMEOUT_NS));
        let hello = self
            .greeting
            .front()
            .map(|(since, _)| since.saturating_add(HELLO_TIMEOUT_NS));
        let wait = self.wait_deadlines().map(|(at, ..)| at).min();
        timer
            .into_iter()
            .chain(deadline)
            .chain(hello)
            .chain(wait)
            .min()
    }

    /// The allocations waiting at their tenant's `memory_limit` whose contract sets a
    /// `wait_timeout`: (when it runs out, tenant, request).
    fn wait_deadlines(&self) -> impl Iterator<Item = (u64, TenantId, RequestId)> + '_ {
        let m = self.manager.as_ref();
        self.conns.values().flat_map(move |c| {
            let waits = c.tenant.zip(m).and_then(|(t, m)| {
                let timeout = m.contract(t).wait_timeout_ns?;
                let at_limit: Vec<RequestId> = m.waiting_at_limit(t).collect();
                Some((t, timeout, at_limit))
            });
            c.pending.iter().filter_map(move |(request, _, asked)| {
                let (t, timeout, at_limit) = waits.as_ref()?;
                at_limit
                    .contains(request)
                    .then(|| (asked.saturating_add(*timeout), *t, *request))
            })
        })
    }

    /// Fails the allocations that waited at their tenant's limit past its
    /// `wait_timeout` (as out of memory), with a log line each.
    fn expire_waits(&mut self) {
        let now = self.now_ns;
        let expired: Vec<(u64, TenantId, RequestId)> = self
            .wait_deadlines()
            .filter(|(at, ..)| *at <= now)
            .collect();
        for (_, tenant, request) in expired {
            let m = self.manager.as_mut().expect("a tenant exists");
            if m.handle_wait_expired(tenant, request) {
                self.log(format!(
                    "{tenant}: an allocation waited at its memory_limit past its wait_timeout; it fails as out of memory"
                ));
            }
        }
    }

    /// Time passed to `now_ns`: the manager's timer runs if due, the process the
    /// manager waits on is closed if it has not answered in time, and so are the
    /// connections that have sent nothing since their hello deadline.
    pub fn handle_timeout(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
        if let Some(m) = self.manager.as_mut()
            && m.poll_timeout().is_some_and(|at| at <= now_ns)
        {
            self.generation += 1;
            m.handle_timeout(now_ns);
        }
        self.expire_waits();
        if let Some((conn, since)) = self.awaiting
            && now_ns.saturating_sub(since) >= ANSWER_TIMEOUT_NS
        {
            self.awaiting = None;
            self.dying.push((
                conn,
                format!("no answer within {} s", ANSWER_TIMEOUT_NS / 1_000_000_000),
            ));
        }
        while let Some(&(since, conn)) = self.greeting.front()
            && now_ns.saturating_sub(since) >= HELLO_TIMEOUT_NS
        {
            self.greeting.pop_front();
            if self.conns.get(&conn).is_some_and(|c| c.tenant.is_none()) {
                let reason = format!("no hello within {} s", HELLO_TIMEOUT_NS / 1_000_000_000);
                self.refuse(conn, "no_hello", reason);
            }
        }
        self.drain();
    }

    /// The next message to send, and to whom.
    pub fn poll_transmit(&mut self) -> Option<(ConnId, DaemonMsg)> {
        self.transmits.pop_front()
    }

    /// The next connection to close, once the messages polled before it are sent.
    pub fn poll_close(&mut self) -> Option<ConnId> {
        self.closes.pop_front()
    }

    /// The next thing the daemon reports.
    pub fn poll_event(&mut self) -> Option<EndpointEvent> {
        self.events.pop_front()
    }

    /// Handles one input arriving at `now_ns` (ns since the daemon started) and carries
    /// out every action that follows.
    pub fn handle(&mut self, now_ns: u64, input: Input) {
        self.now_ns = now_ns;
        match input {
            Input::Accepted {
                conn,
                pid,
                uid,
                cgroups,
            } => {
                let c = Conn {
                    pid,
                    peer: Peer { uid, cgroups },
                    name: String::new(),
                    granularity_bytes: self.config.chunk_bytes,
                    tenant: None,
                    suspended: false,
                    pending: Vec::new(),
                    relocations: 0,
                    waits: 0,
                    wait_ns: 0,
                    suspend_sent: None,
                    relocation_ns: 0,
                    suspensions: 0,
                    drain_ns: 0,
                    busy: false,
                    last_progress_ns: now_ns,
                    managed_bytes: 0,
                    pinned_bytes: 0,
                };
                let most = self.config.max_connections;
                let refusal = if uid != self.euid && self.config.socket_group.is_none() {
                    Some((
                        "user",
                        format!("uid {uid} may not use the daemon of uid {}", self.euid),
                    ))
                } else if self.conns.len() >= most {
                    Some((
                        "connections",
                        format!(
                            "the daemon serves at most {most} connections at once \
                             (--max-connections)"
                        ),
                    ))
                } else {
                    None
                };
                if let Some((kind, reason)) = refusal {
                    *self.refusals.entry(kind).or_default() += 1;
                    self.warn(format!("connection {conn} refused: {reason}"));
                    self.transmits
                        .push_back((conn, DaemonMsg::Refused { reason }));
                    self.closes.push_back(conn);
                    return;
                }
                self.conns.insert(conn, c);
                self.greeting.push_back((now_ns, conn));
            }
            Input::Frame(conn, msg) => self.frame(conn, msg),
            Input::Unreadable(conn, why) => self.protocol_violation(conn, why),
            Input::Gone(conn, why) => self.dying.push((conn, why)),
            Input::Exited(pid) => self.exited(pid),
        }
        self.drain();
        self.log_wait_begun();
    }

    /// Logs the allocation this input asked for if it waits now (for room, or at its
    /// tenant's limit); its answer is logged too if it waited long
    /// ([`LOGGED_WAIT_NS`]).
    fn log_wait_begun(&mut self) {
        let Some((tenant, request, bytes)) = self.asked.take() else {
            return;
        };
        let waiting = self
            .conn_of(tenant)
            .and_then(|c| self.conns.get(&c))
            .is_some_and(|c| c.pending.iter().any(|p| p.0 == request));
        if waiting {
            self.log(format!(
                "{tenant}: an allocation of {:.1} MiB waits for room",
                bytes as f64 / (1 << 20) as f64
            ));
        }
    }

    /// A client's frame, by what it says and whether its connection is a tenant yet.
    fn frame(&mut self, conn: ConnId, msg: ClientMsg) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let tenant = c.tenant;
        if !matches!(msg, ClientMsg::Observe { .. }) {
            self.generation += 1;
        }
        match (msg, tenant) {
            (ClientMsg::Observe { protocol }, None) => self.observe(conn, protocol),
            (
                ClientMsg::Hello {
                    protocol,
                    name,
                    device_total_bytes,
                    granularity_bytes,
                    memory_limit_bytes,
                    device_uuid,
                    ..
                },
                None,
            ) => {
                if let Err(reason) = check_version(protocol)
                    .and_then(|()| self.same_device(&device_uuid))
                    .and_then(|()| self.admit(device_total_bytes, granularity_bytes))
                {
                    self.refuse(conn, "hello", reason);
                    return;
                }
                self.start_tenant(conn, name, granularity_bytes, memory_limit_bytes);
                // What the process still holds, it declares now.
                let pid = self.conns[&conn].pid;
                self.exited(pid);
            }
            (ClientMsg::Alloc { request, bytes }, Some(tenant)) => {
                self.alloc(conn, tenant, request, bytes);
            }
            (ClientMsg::Free { buffer }, Some(tenant)) => {
                let m = self.manager.as_mut().expect("a tenant exists");
                if let Err(e) = m.handle_free(tenant, BufferId(buffer)) {
                    self.protocol_violation(conn, format!("free refused: {e}"));
                }
            }
            (ClientMsg::Suspended, Some(tenant)) => {
                self.awaiting = None;
                if let Some(sent) = c.suspend_sent.take() {
                    c.drain_ns += self.now_ns.saturating_sub(sent);
                }
                let m = self.manager.as_mut().expect("a tenant exists");
                if let Err(e) = m.handle_suspended(tenant) {
                    self.protocol_violation(conn, e.to_string());
                }
                #[cfg(test)]
                if self.mutation == Some(Mutation::ResumeEarly) {
                    self.execute(Execution::Resume { tenant });
                }
            }
            (ClientMsg::Relocated { copy }, Some(tenant)) => self.relocated(conn, tenant, copy),
            (
                ClientMsg::RelocatedBatch {
                    batch,
                    failed,
                    error,
                    elapsed_ns,
                },
                Some(tenant),
            ) => self.relocated_batch(conn, tenant, batch, &failed, &error, elapsed_ns),
            (ClientMsg::Busy, Some(tenant)) => self.demand(tenant, true),
            (ClientMsg::Idle, Some(tenant)) => self.demand(tenant, false),
            (ClientMsg::Held { buffers }, Some(tenant)) => self.adopt(conn, tenant, &buffers),
            (ClientMsg::DeviceMemory { free_bytes, .. }, Some(_)) => {
                self.device_memory(free_bytes);
            }
            (ClientMsg::Progress(p), Some(tenant)) => self.progress(tenant, &p),
            (ClientMsg::RemoteCost { remote_cost }, Some(tenant)) => {
                self.remote_cost(conn, tenant, remote_cost);
            }
            (ClientMsg::RelocateFailed { copy, error }, Some(tenant)) => {
                self.relocate_failed(conn, tenant, copy, &error);
            }
            (
                ClientMsg::Unmovable {
                    managed_bytes,
                    pinned_bytes,
                },
                Some(tenant),
            ) => self.unmovable(conn, tenant, managed_bytes, pinned_bytes),
            (msg, _) => {
                let what = match tenant {
                    None => "before its hello",
                    Some(_) => "out of turn",
                };
                self.protocol_violation(conn, format!("unexpected {msg:?} {what}"));
            }
        }
    }

    /// An observer's one frame: the snapshot (or why not), then the connection closes.
    fn observe(&mut self, conn: ConnId, protocol: u32) {
        let reply = match check_version(protocol) {
            Ok(()) => DaemonMsg::Snapshot(Box::new(self.snapshot())),
            Err(reason) => DaemonMsg::Refused { reason },
        };
        if self.conns.contains_key(&conn) {
            self.transmits.push_back((conn, reply));
        }
        self.dying.push((conn, "observed".into()));
    }

    /// An admitted hello: the connection becomes a tenant under the lowest free number,
    /// with the contract configured for its name and its device's granularity, and is
    /// welcomed. `memory_limit_bytes` (not 0): a limit the process's environment sets
    /// (HAMi-core's variables), applied where it is below the contract's.
    fn start_tenant(
        &mut self,
        conn: ConnId,
        name: String,
        granularity_bytes: u64,
        memory_limit_bytes: u64,
    ) {
        let manager = self.manager.as_mut().expect("admit builds the manager");
        let number = match self.tenants.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.tenants.push(None);
                self.tenants.len() - 1
            }
        };
        let tenant = TenantId(number as u32);
        let claim = self
            .config
            .contracts
            .claim(&name, &self.conns[&conn].peer, self.euid);
        let mut contract = claim.contract();
        if memory_limit_bytes > 0 {
            let limit = contract
                .memory_limit_bytes
                .map_or(memory_limit_bytes, |l| l.min(memory_limit_bytes));
            contract.memory_limit_bytes = Some(limit);
        }
        if let Err(e) = manager.handle_tenant_start(tenant, contract) {
            // The number was free here, so only the contract can be refused.
            self.refuse(conn, "contract", format!("contract of {name:?}: {e}"));
            return;
        }
        self.tenants[number] = Some(conn);
        self.served += 1;
        let (chunk_bytes, vram_bytes) = (manager.config().chunk_bytes, manager.config().vram_bytes);
        let needs = manager.needs();
        let c = self.conns.get_mut(&conn).expect("present");
        c.tenant = Some(tenant);
        c.name = name;
        c.granularity_bytes = granularity_bytes;
        // A claim refused is an operator's business: someone asked for another's
        // contract, or a prolog bound it to the wrong job.
        let level = match claim {
            Claim::Refused(_) => {
                self.claims_refused += 1;
                Level::Warn
            }
            _ => Level::Info,
        };
        self.log_at(
            level,
            format!(
                "{tenant} connected: pid {}, {:?}; {}",
                self.conns[&conn].pid,
                self.conns[&conn].name,
                claim.words()
            ),
        );
        self.send(
            conn,
            DaemonMsg::Welcome {
                protocol: PROTOCOL_VERSION,
                tenant: tenant.0,
                chunk_bytes,
                vram_bytes,
                idle_report_ns: if needs.gpu_demand { IDLE_REPORT_NS } else { 0 },
                progress_report_ns: if needs.progress {
                    PROGRESS_REPORT_NS
                } else {
                    0
                },
                vram_limit_bytes: contract.vram_limit_bytes.unwrap_or(0),
                probe_remote: self.probe_remote && needs.progress,
            },
        );
    }

    /// A tenant's allocation: refused at once beyond all the daemon manages, else
    /// handed to the manager under a request number of the core's (the answer comes
    /// with its actions).
    fn alloc(&mut self, conn: ConnId, tenant: TenantId, request: u64, bytes: u64) {
        let m = self.manager.as_ref().expect("a tenant exists");
        let most = m.config().vram_bytes.saturating_add(m.config().host_bytes);
        let granularity = self.conns[&conn].granularity_bytes;
        let bytes = match claims::check_request(bytes, granularity, m.config().chunk_bytes, most) {
            Ok(placed) => placed,
            Err(error) => {
                // Refused before the policies lay out chunks for it.
                self.allocations_failed += 1;
                self.send(
                    conn,
                    DaemonMsg::AllocFailed {
                        request,
                        out_of_memory: true,
                        error,
                    },
                );
                return;
            }
        };
        let c = self.conns.get_mut(&conn).expect("present");
        let id = RequestId(self.next_request);
        self.next_request += 1;
        c.pending.push((id, request, self.now_ns));
        self.asked = Some((tenant, id, bytes));
        let m = self.manager.as_mut().expect("a tenant exists");
        m.handle_alloc(AllocRequest {
            request: id,
            tenant,
            bytes,
            kind: BufferKind::Device,
            priority: None,
            chunk_priorities: Vec::new(),
        });
    }

    /// A tenant moved the chunk of relocation `copy`: its figures count it, and the
    /// manager hears the copy is done.
    fn relocated(&mut self, conn: ConnId, tenant: TenantId, copy: u64) {
        let Some(sent) = self.own_copy(copy, tenant) else {
            self.protocol_violation(conn, format!("relocation {copy} is not its own"));
            return;
        };
        let c = self.conns.get_mut(&conn).expect("present");
        c.relocations += 1;
        c.relocation_ns += self.now_ns.saturating_sub(sent);
        self.move_latency.record(self.now_ns.saturating_sub(sent));
        self.copy = None;
        self.awaiting = None;
        let m = self.manager.as_mut().expect("a tenant exists");
        if let Err(e) = m.handle_copy_done(CopyId(copy)) {
            self.protocol_violation(conn, e.to_string());
        }
    }

    /// A tenant's bulk move is over: its figures are kept for `gpuswap top`, its failures
    /// logged, and the manager hears which moves failed.
    fn relocated_batch(
        &mut self,
        conn: ConnId,
        tenant: TenantId,
        batch: u64,
        failed: &[u32],
        error: &str,
        elapsed_ns: u64,
    ) {
        let Some(sent) = self.own_copy(batch, tenant) else {
            self.protocol_violation(conn, format!("bulk move {batch} is not its own"));
            return;
        };
        self.move_latency.record(self.now_ns.saturating_sub(sent));
        self.copy = None;
        self.awaiting = None;
        if !failed.is_empty() {
            self.log(format!(
                "{tenant}: {} moves of bulk move {batch} failed: {error}",
                failed.len()
            ));
        }
        if let Some(mut row) = self.batch.take() {
            row.elapsed_ns = elapsed_ns;
            row.gb_per_s = row.bytes as f64 / elapsed_ns.max(1) as f64;
            self.batch_moved_bytes += row.bytes;
            self.log(format!(
                "{tenant}: bulk move {batch}: {} chunks to host memory, {} to VRAM, {:.1} MiB \
                 in {:.1} ms ({:.1} GB/s)",
                row.to_host_chunks,
                row.to_vram_chunks,
                row.bytes as f64 / (1 << 20) as f64,
                elapsed_ns as f64 / 1e6,
                row.gb_per_s
            ));
            if self.batches.len() == BATCHES_SHOWN {
                self.batches.pop_front();
            }
            self.batches.push_back(row);
        }
        let m = self.manager.as_mut().expect("a tenant exists");
        if let Err(e) = m.handle_batch_done(CopyId(batch), failed, self.now_ns) {
            self.protocol_violation(conn, e.to_string());
        }
    }

    /// A tenant says it has GPU work, or none: the manager's turns hear it.
    fn demand(&mut self, tenant: TenantId, busy: bool) {
        if let Some(c) = self.conn_of(tenant).and_then(|c| self.conns.get_mut(&c)) {
            // An idle process reports nothing, and its next window claims the time since
            // its last report: its work starts now, and the idle time before it is no
            // slowness of its (a woken tenant would read as stalled).
            if busy && !c.busy {
                c.last_progress_ns = self.now_ns;
            }
            c.busy = busy;
        }
        let m = self.manager.as_mut().expect("a tenant exists");
        if busy {
            m.handle_gpu_busy(tenant, self.now_ns);
        } else {
            m.handle_gpu_idle(tenant, self.now_ns);
        }
        #[cfg(test)]
        if busy && self.mutation == Some(Mutation::ResumeOnBusy) && m.parked(tenant) {
            self.execute(Execution::Resume { tenant });
        }
    }

    /// A tenant's progress report: the manager's estimate and touch marks hear it. The
    /// window is the daemon's own (the time since the tenant's last report, at most the
    /// one it claims), so a tenant cannot stretch or shrink time for the estimate.
    fn progress(&mut self, tenant: TenantId, p: &wire::Progress) {
        let Some(c) = self.conn_of(tenant).and_then(|c| self.conns.get_mut(&c)) else {
            return;
        };
        let since = std::mem::replace(&mut c.last_progress_ns, self.now_ns);
        let progress = gpuswap_core::gpu_time::Progress {
            window_ns: p.window_ns.min(self.now_ns.saturating_sub(since)),
            launches: p.launches,
            blocks: p.blocks,
            completed: p.completed,
            completed_blocks: p.completed_blocks,
            sync_wait_ns: p.sync_wait_ns,
            idle: p.idle,
        };
        let touched: Vec<BufferId> = p.touched.iter().map(|b| BufferId(*b)).collect();
        let m = self.manager.as_mut().expect("a tenant exists");
        m.handle_progress(tenant, &progress, &touched, self.now_ns);
    }

    /// A tenant's measurement of the link's remote-read cost: the first one the daemon
    /// asked for sets where the automatic choice starts (later ones, which tenants that
    /// connected before it sent may still send, are dropped). Outside 1 to
    /// [`MAX_REMOTE_COST`], or never asked for: a protocol error.
    fn remote_cost(&mut self, conn: ConnId, tenant: TenantId, remote_cost: f64) {
        if !self.config.probe_remote || !(1.0..=MAX_REMOTE_COST).contains(&remote_cost) {
            let why =
                format!("remote cost {remote_cost} not asked for, or not in 1..={MAX_REMOTE_COST}");
            self.protocol_violation(conn, why);
            return;
        }
        if !std::mem::take(&mut self.probe_remote) {
            return;
        }
        self.log(format!(
            "{tenant} measured the link: a remote read takes {remote_cost:.1} local reads' time"
        ));
        let m = self.manager.as_mut().expect("a tenant exists");
        m.handle_remote_cost(remote_cost, self.now_ns);
    }

    /// A tenant could not move the chunk of relocation `copy`: logged, and the manager
    /// hears the copy failed.
    fn relocate_failed(&mut self, conn: ConnId, tenant: TenantId, copy: u64, error: &str) {
        if self.own_copy(copy, tenant).is_none() {
            self.protocol_violation(conn, format!("relocation {copy} is not its own"));
            return;
        }
        self.copy = None;
        self.awaiting = None;
        self.log(format!("{tenant}: relocation {copy} failed: {error}"));
        let m = self.manager.as_mut().expect("a tenant exists");
        if let Err(e) = m.handle_copy_failed(CopyId(copy)) {
            self.protocol_violation(conn, e.to_string());
        }
    }

    /// Whether a process of the device `uuid` (empty: the driver gave none) may be
    /// served: a daemon bound to one GPU (`--device`) serves that GPU's processes only.
    fn same_device(&self, uuid: &str) -> Result<(), String> {
        match &self.config.device_uuid {
            Some(ours) if !uuid.is_empty() && !uuid.eq_ignore_ascii_case(ours) => Err(format!(
                "this daemon serves {ours}; the process allocates on {uuid}, whose daemon \
                 listens at {} (or set GPUSWAP_SOCKET)",
                wire::device_socket(uuid, self.euid).display()
            )),
            _ => Ok(()),
        }
    }

    /// Checks the hello's claims (a device no larger than any GPU, a granularity that
    /// divides the chunk size) and builds the manager at the first hello when no VRAM
    /// size was given.
    fn admit(&mut self, device_total_bytes: u64, granularity_bytes: u64) -> Result<(), String> {
        claims::check_device(device_total_bytes)?;
        let chunk = self.config.chunk_bytes;
        claims::check_granularity(granularity_bytes, chunk)?;
        if self.manager.is_none() && device_total_bytes < chunk {
            return Err(format!(
                "the device reports {device_total_bytes} bytes of memory, less than a chunk: \
                 start the daemon with --vram"
            ));
        }
        if self.manager.is_none() {
            // A tenth of the device is left to what the daemon does not manage: every
            // process's CUDA context, and memory allocated outside the interposer.
            let vram = device_total_bytes / 10 * 9 / chunk * chunk;
            self.log(format!(
                "managing {vram} bytes of VRAM (nine tenths of the device's \
                 {device_total_bytes}; --vram sets it)"
            ));
            self.manager = Some(manager(&self.config, vram));
        }
        Ok(())
    }

    /// Refuses `conn` with `reason`, counted under `kind`.
    fn refuse(&mut self, conn: ConnId, kind: &'static str, reason: String) {
        *self.refusals.entry(kind).or_default() += 1;
        self.warn(format!("connection {conn} refused: {reason}"));
        self.send(conn, DaemonMsg::Refused { reason });
        self.dying.push((conn, "refused".into()));
    }

    fn protocol_violation(&mut self, conn: ConnId, reason: String) {
        *self.refusals.entry("protocol").or_default() += 1;
        if self.conns.contains_key(&conn) {
            let refused = DaemonMsg::Refused {
                reason: format!("protocol error: {reason}"),
            };
            self.transmits.push_back((conn, refused));
        }
        self.dying.push((conn, format!("protocol error: {reason}")));
    }

    /// Carries out the manager's actions, then closes dying connections (their exits
    /// bring more actions), until nothing is left; then forgets the hello deadlines of
    /// connections that have spoken or closed, oldest first.
    fn drain(&mut self) {
        loop {
            while let Some(action) = self.manager.as_mut().and_then(Manager::poll_action) {
                self.act(action);
            }
            while let Some(switch) = self.manager.as_mut().and_then(Manager::poll_switch) {
                self.log(format!(
                    "gpu time: {} ({})",
                    switch.to.name(),
                    switch.reason
                ));
            }
            let Some((conn, why)) = self.dying.pop() else {
                break;
            };
            self.close(conn, &why);
        }
        while let Some(&(_, conn)) = self.greeting.front()
            && self.conns.get(&conn).is_none_or(|c| c.tenant.is_some())
        {
            self.greeting.pop_front();
        }
        self.rebudget();
    }

    fn close(&mut self, conn: ConnId, why: &str) {
        let Some(c) = self.conns.remove(&conn) else {
            return;
        };
        self.closes.push_back(conn);
        if self.awaiting.is_some_and(|(a, _)| a == conn) {
            self.awaiting = None;
        }
        if let Some(tenant) = c.tenant {
            self.generation += 1;
            let usage = self
                .manager
                .as_ref()
                .map(|m| m.usage(tenant))
                .unwrap_or_default();
            // A process that disconnected left as processes do; any other end (a
            // protocol error, no answer, a failed write) is the daemon's doing.
            let level = if why == "disconnected" {
                Level::Info
            } else {
                Level::Warn
            };
            self.log_at(
                level,
                format!(
                    "{tenant} (pid {}) gone: {why}; {} bytes evicted, {} returned, {} chunk moves \
                 taking {:.1} ms ({:.0} us each from command to answer), {} suspensions \
                 drained in {:.1} ms, {} allocations waited {:.1} ms",
                    c.pid,
                    usage.bytes_evicted,
                    usage.bytes_returned,
                    c.relocations,
                    c.relocation_ns as f64 / 1e6,
                    c.relocation_ns as f64 / 1e3 / c.relocations.max(1) as f64,
                    c.suspensions,
                    c.drain_ns as f64 / 1e6,
                    c.waits,
                    c.wait_ns as f64 / 1e6
                ),
            );
            self.tenants[tenant.0 as usize] = None;
            self.hold_tenant(c.pid, tenant, c.managed_bytes + c.pinned_bytes);
            if self.copy.is_some_and(|(_, t, _)| t == tenant) {
                self.copy = None;
            }
            if let Some(m) = self.manager.as_mut() {
                m.handle_tenant_exit(tenant);
            }
        }
    }

    fn conn_of(&self, tenant: TenantId) -> Option<ConnId> {
        self.tenants.get(tenant.0 as usize).copied().flatten()
    }

    /// Carries out one of the manager's actions, by its kind.
    fn act(&mut self, action: Action) {
        match action {
            Action::Mapping(mapping) => self.map(mapping),
            Action::Reply(reply) => self.reply(reply),
            Action::Execution(execution) => self.execute(execution),
            Action::Dma(dma) => self.dma(dma),
        }
    }

    /// A mapping: a new buffer's layout is kept for its grant.
    fn map(&mut self, mapping: Mapping) {
        match mapping {
            Mapping::Map {
                buffer,
                bytes,
                chunk_bytes,
                locations,
                ..
            } => {
                let locations = locations.into_iter().map(wire_location).collect();
                self.mapped.insert(buffer, (bytes, chunk_bytes, locations));
            }
            // The process moved and mapped the chunk before it answered the copy, and
            // released a freed buffer before it said so: nothing is left to do.
            Mapping::Remap { .. } | Mapping::Unmap { .. } => {}
        }
    }

    /// An answer to a tenant's allocation, under the client's request number.
    fn reply(&mut self, reply: Reply) {
        match reply {
            Reply::Grant {
                request,
                tenant,
                buffer,
            } => {
                let (bytes, chunk_bytes, locations) = self
                    .mapped
                    .remove(&buffer)
                    .expect("the core maps a buffer before it grants it");
                if self.placed_again(tenant, request, buffer, bytes) {
                    return;
                }
                #[cfg(test)]
                if self.mutation == Some(Mutation::DropLateGrant) && self.waited(tenant, request) {
                    self.answered(tenant, request);
                    return;
                }
                if let Some(client) = self.answered(tenant, request) {
                    self.send_tenant(
                        tenant,
                        DaemonMsg::Granted {
                            request: client,
                            buffer: buffer.0,
                            bytes,
                            chunk_bytes,
                            placement: wire::runs(locations),
                        },
                    );
                }
            }
            Reply::Fail {
                request,
                tenant,
                error,
            } => {
                if let Some(client) = self.answered(tenant, request) {
                    let out_of_memory = !matches!(error, AllocError::ZeroBytes);
                    self.allocations_failed += 1;
                    self.send_tenant(
                        tenant,
                        DaemonMsg::AllocFailed {
                            request: client,
                            out_of_memory,
                            error: error.to_string(),
                        },
                    );
                }
            }
            // Launch gating is refused at start (`check_policy`).
            Reply::LaunchReady { .. } | Reply::LaunchFail { .. } => {}
        }
    }

    /// Control of a tenant's execution: suspend, resume or kill its process.
    fn execute(&mut self, execution: Execution) {
        match execution {
            Execution::Suspend { tenant, .. } => {
                if let Some(conn) = self.conn_of(tenant) {
                    self.awaiting = Some((conn, self.now_ns));
                }
                if let Some(c) = self.conn_of(tenant).and_then(|c| self.conns.get_mut(&c)) {
                    c.suspended = true;
                    c.suspensions += 1;
                    c.suspend_sent = Some(self.now_ns);
                }
                self.send_tenant(tenant, DaemonMsg::Suspend);
            }
            Execution::Resume { tenant } => {
                #[cfg(test)]
                let keep = self.mutation == Some(Mutation::KeepSuspended);
                #[cfg(not(test))]
                let keep = false;
                if let Some(c) = self.conn_of(tenant).and_then(|c| self.conns.get_mut(&c)) {
                    c.suspended = keep;
                }
                self.send_tenant(tenant, DaemonMsg::Resume);
            }
            Execution::Kill { tenant, reason } => {
                self.send_tenant(
                    tenant,
                    DaemonMsg::Kill {
                        reason: reason.to_string(),
                    },
                );
                if let Some(conn) = self.conn_of(tenant) {
                    self.dying.push((conn, format!("killed: {reason}")));
                }
            }
            // Policy time is real time here; kernel scheduling is refused at start
            // (`check_policy`).
            Execution::PolicyRan { .. } | Execution::Preempt { .. } | Execution::Start { .. } => {}
        }
    }

    /// Work for the copy engines: the tenant's process moves the chunk itself.
    fn dma(&mut self, dma: Dma) {
        match dma {
            Dma::Copy {
                copy,
                tenant,
                chunk,
                to,
                ..
            } => {
                self.copy = Some((copy, tenant, self.now_ns));
                if let Some(conn) = self.conn_of(tenant) {
                    self.awaiting = Some((conn, self.now_ns));
                }
                self.send_tenant(
                    tenant,
                    DaemonMsg::Relocate {
                        copy: copy.0,
                        buffer: chunk.buffer.0,
                        chunk: chunk.index,
                        to: wire_location(to),
                    },
                )
            }
            Dma::Batch {
                copy,
                tenant,
                moves,
            } => {
                self.copy = Some((copy, tenant, self.now_ns));
                if let Some(conn) = self.conn_of(tenant) {
                    self.awaiting = Some((conn, self.now_ns));
                }
                let to_host = moves
                    .iter()
                    .filter(|m| m.to == gpuswap_core::Location::Host)
                    .count() as u32;
                self.batch = Some(wire::BatchRow {
                    tenant: tenant.0,
                    to_host_chunks: to_host,
                    to_vram_chunks: moves.len() as u32 - to_host,
                    bytes: moves.iter().map(|m| m.bytes).sum(),
                    ..wire::BatchRow::default()
                });
                let moves = moves
                    .iter()
                    .map(|m| wire::ChunkMove {
                        buffer: m.chunk.buffer.0,
                        chunk: m.chunk.index,
                        to: wire_location(m.to),
                    })
                    .collect();
                self.send_tenant(
                    tenant,
                    DaemonMsg::RelocateBatch {
                        batch: copy.0,
                        moves,
                    },
                );
            }
            // The copy's tenant is gone, and with it the process that would answer.
            Dma::Cancel { .. } => {}
        }
    }

    /// When the outstanding copy was asked for, if it is `copy` and `tenant`'s.
    fn own_copy(&self, copy: u64, tenant: TenantId) -> Option<u64> {
        self.copy
            .filter(|&(id, t, _)| id == CopyId(copy) && t == tenant)
            .map(|(_, _, sent)| sent)
    }

    /// The client's number of an answered request, and the wait recorded.
    fn answered(&mut self, tenant: TenantId, request: RequestId) -> Option<u64> {
        let conn = self.conn_of(tenant)?;
        let c = self.conns.get_mut(&conn)?;
        let at = c.pending.iter().position(|p| p.0 == request)?;
        let (_, client, asked) = c.pending.swap_remove(at);
        let waited = self.now_ns.saturating_sub(asked);
        // An answer within a millisecond did not wait for a relocation.
        if waited > 1_000_000 {
            c.waits += 1;
            c.wait_ns += waited;
        }
        if waited >= LOGGED_WAIT_NS {
            self.log(format!(
                "{tenant}: an allocation was answered after waiting {:.1} ms",
                waited as f64 / 1e6
            ));
        }
        Some(client)
    }

    /// Whether `tenant`'s pending `request` was asked before now.
    #[cfg(test)]
    fn waited(&self, tenant: TenantId, request: RequestId) -> bool {
        let c = self.conn_of(tenant).and_then(|c| self.conns.get(&c));
        c.and_then(|c| c.pending.iter().find(|p| p.0 == request))
            .is_some_and(|p| p.2 < self.now_ns)
    }

    fn send_tenant(&mut self, tenant: TenantId, msg: DaemonMsg) {
        if let Some(conn) = self.conn_of(tenant) {
            self.send(conn, msg);
        }
    }

    /// Queues a message to a live connection. One that cannot take it (gone, or stuck
    /// past the serve loop's write timeout) comes back as [`Input::Gone`], which the
    /// manager sees as its tenant's crash.
    fn send(&mut self, conn: ConnId, msg: DaemonMsg) {
        if self.dying.iter().any(|(d, _)| *d == conn) || !self.conns.contains_key(&conn) {
            return;
        }
        self.transmits.push_back((conn, msg));
    }

    /// The refusals by kind, as a snapshot carries them.
    fn refusal_counts(&self) -> BTreeMap<String, u64> {
        self.refusals
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect()
    }

    /// The state `gpuswap top` (and the metrics) show, as of the latest input.
    pub fn snapshot(&self) -> wire::Snapshot {
        let Some(m) = self.manager.as_ref() else {
            return wire::Snapshot {
                device_uuid: self.config.device_uuid.clone().unwrap_or_default(),
                mode: self.config.policy.name().to_owned(),
                host_bytes: self.config.host_bytes,
                chunk_bytes: self.config.chunk_bytes,
                uptime_s: self.now_ns as f64 / 1e9,
                generation: self.generation,
                refusals: self.refusal_counts(),
                ..Default::default()
            };
        };
        let tenants = self
            .tenants
            .iter()
            .enumerate()
            .filter_map(|(i, c)| Some((TenantId(i as u32), &self.conns[c.as_ref()?])))
            .map(|(tenant, c)| {
                let usage = m.usage(tenant);
                wire::TenantRow {
                    tenant: tenant.0,
                    pid: c.pid,
                    name: c.name.clone(),
                    buffers: m.buffers_of(tenant).count() as u64,
                    vram_bytes: usage.vram_bytes,
                    host_bytes: usage.host_bytes,
                    evicted_bytes: usage.bytes_evicted,
                    returned_bytes: usage.bytes_returned,
                    relocations: c.relocations,
                    waits: c.waits,
                    wait_ns: c.wait_ns,
                    relocation_ns: c.relocation_ns,
                    drain_ns: c.drain_ns,
                    suspended: c.suspended,
                    contract: contract_row(&m.contract(tenant)),
                    turn: turn(m, tenant, c.suspended),
                    waiting_ns: c
                        .pending
                        .iter()
                        .map(|(_, _, asked)| self.now_ns.saturating_sub(*asked))
                        .max()
                        .unwrap_or(0),
                    busy: c.busy,
                    slowdown: m.slowdown_estimate(tenant).unwrap_or(0.0),
                    managed_bytes: c.managed_bytes,
                    pinned_bytes: c.pinned_bytes,
                }
            })
            .collect();
        wire::Snapshot {
            move_latency: self.move_latency.clone(),
            device_uuid: self.config.device_uuid.clone().unwrap_or_default(),
            mode: m.config().policy.name().to_owned(),
            vram_bytes: m.config().vram_bytes,
            vram_used_bytes: m.vram_used_bytes(),
            host_bytes: m.config().host_bytes,
            host_used_bytes: m.host_used_bytes(),
            chunk_bytes: m.config().chunk_bytes,
            uptime_s: self.now_ns as f64 / 1e9,
            tenants_served: self.served,
            tenants,
            gpu_time: self.config.gpu_time.name().to_owned(),
            choice: m
                .gpu_time_choice()
                .map_or(String::new(), |c| c.name().to_owned()),
            switches: m.gpu_time_switches(),
            generation: self.generation,
            refusals: self.refusal_counts(),
            allocations_failed: self.allocations_failed,
            claims_refused: self.claims_refused,
            holder: m.holder().map(|t| t.0),
            handovers: m.handovers(),
            batch_moved_bytes: self.batch_moved_bytes,
            batches: self.batches.iter().cloned().collect(),
            held_by_gone_bytes: self.held.by_gone_bytes(),
            vram_budget_bytes: m.vram_used_bytes() + m.vram_free_bytes(),
        }
    }

    /// Whether the manager runs a relocation (allocations wait for it).
    pub fn relocating(&self) -> bool {
        self.manager.as_ref().is_some_and(Manager::relocating)
    }

    /// Checks the endpoint's invariants and the manager's (tests and `gpuswap check
    /// --daemon` call it after every input): every tenant maps to a live connection that
    /// names it back; nobody is suspended unless a relocation says so, and then one
    /// process at most (the manager moves one tenant's chunks at a time); the
    /// outstanding copy and the awaited answer belong to live connections; no mapping
    /// outlives the event that granted it.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (number, conn) in self.tenants.iter().enumerate() {
            let Some(conn) = conn else { continue };
            match self.conns.get(conn) {
                Some(c) if c.tenant == Some(TenantId(number as u32)) => {}
                Some(c) => {
                    return Err(format!(
                        "tenant {number} maps to connection {conn}, which is {:?}",
                        c.tenant
                    ));
                }
                None => {
                    return Err(format!(
                        "tenant {number} maps to connection {conn}, which is closed"
                    ));
                }
            }
        }
        for (conn, c) in &self.conns {
            if let Some(tenant) = c.tenant
                && self.conn_of(tenant) != Some(*conn)
            {
                return Err(format!(
                    "connection {conn} is {tenant}, which does not map to it"
                ));
            }
            // What a tenant said it cannot have moved is what the manager counts.
            let unmovable = c.managed_bytes.saturating_add(c.pinned_bytes);
            if let (Some(tenant), Some(m)) = (c.tenant, &self.manager)
                && m.unmovable_bytes(tenant) != unmovable
            {
                return Err(format!(
                    "{tenant} said it holds {unmovable} bytes the daemon cannot move, and \
                     the manager counts {}",
                    m.unmovable_bytes(tenant)
                ));
            }
        }
        let relocating = self.relocating();
        let parked = |c: &Conn| {
            c.tenant
                .is_some_and(|t| self.manager.as_ref().is_some_and(|m| m.parked(t)))
        };
        // Parked tenants are suspended between relocations, by turns.
        let suspended: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.suspended && !parked(c))
            .map(|(conn, _)| *conn)
            .collect();
        let holder = self.manager.as_ref().and_then(Manager::holder);
        if let Some(holder) = holder.filter(|_| !relocating) {
            let beside: Vec<ConnId> = self
                .conns
                .iter()
                .filter(|(_, c)| c.busy && !c.suspended && c.tenant != Some(holder))
                .map(|(conn, _)| *conn)
                .collect();
            if !beside.is_empty() {
                return Err(format!(
                    "connections {beside:?} run beside {holder}, which holds the GPU"
                ));
            }
        }
        if !suspended.is_empty() && !relocating {
            return Err(format!(
                "connections {suspended:?} stay suspended with no relocation running"
            ));
        }
        if suspended.len() > 1 {
            return Err(format!("connections {suspended:?} are suspended at once"));
        }
        if let Some((copy, tenant, _)) = self.copy
            && (!relocating || self.conn_of(tenant).is_none())
        {
            return Err(format!(
                "relocation {} of {tenant} is outstanding with no relocation running or no \
                 connection",
                copy.0
            ));
        }
        if let Some((conn, _)) = self.awaiting
            && !self.conns.contains_key(&conn)
        {
            return Err(format!("the answer of closed connection {conn} is awaited"));
        }
        if !self.mapped.is_empty() {
            return Err(format!(
                "{} buffers mapped and never granted",
                self.mapped.len()
            ));
        }
        self.manager
            .as_ref()
            .map_or(Ok(()), Manager::check_invariants)
    }

    fn log(&mut self, line: String) {
        self.log_at(Level::Info, line);
    }

    fn warn(&mut self, line: String) {
        self.log_at(Level::Warn, line);
    }

    fn log_at(&mut self, level: Level, line: String) {
        if self.config.verbose {
            self.events.push_back(EndpointEvent::Log(level, line));
        }
    }
}

fn check_version(protocol: u32) -> Result<(), String> {
    if protocol == PROTOCOL_VERSION {
        Ok(())
    } else {
        Err(format!(
            "protocol version {protocol} is not the daemon's {PROTOCOL_VERSION}: use the \
             interposer and gpuswap of one build"
        ))
    }
}

fn wire_location(l: gpuswap_core::Location) -> wire::Location {
    match l {
        gpuswap_core::Location::Vram => wire::Location::Vram,
        gpuswap_core::Location::Host => wire::Location::Host,
    }
}

/// What `gpuswap top` shows of a tenant's turn: a tenant suspended while another
/// holds the GPU is held, parked already or on its way there.
fn turn(m: &Manager, tenant: TenantId, suspended: bool) -> String {
    match (m.gpu_time_choice(), m.holder()) {
        (None, _) => String::new(),
        _ if m.demoted(tenant) => "demoted".into(),
        (_, None) => "running".into(),
        (_, Some(h)) if h == tenant => "holder".into(),
        _ if m.parked(tenant) || suspended => "held".into(),
        _ => "running".into(),
    }
}

/// The daemon's manager over `vram_bytes`: an allocation that fits in free VRAM is
/// served while a relocation waits for a process (to drain, or to move a chunk), so
/// that a slow or frozen victim holds up only what needs its memory.
fn manager(config: &DaemonConfig, vram_bytes: u64) -> Manager {
    let mut manager = Manager::new(manager_config(config, vram_bytes));
    manager.set_serve_during_relocation(true);
    manager
}

fn manager_config(config: &DaemonConfig, vram_bytes: u64) -> ManagerConfig {
    ManagerConfig {
        vram_bytes,
        host_bytes: config.host_bytes,
        chunk_bytes: config.chunk_bytes,
        policy: config.policy.clone(),
        return_interval_ns: config.return_interval_ns,
        seed: 1,
        scheduling: Default::default(),
        gpu_time: config.gpu_time,
        idle: config.idle,
    }
}

/// A contract as a snapshot shows it.
fn contract_row(c: &Contract) -> wire::ContractRow {
    wire::ContractRow {
        vram_guarantee_bytes: c.vram_guarantee_bytes,
        vram_limit_bytes: c.vram_limit_bytes,
        memory_limit_bytes: c.memory_limit_bytes,
        at_limit: c.at_limit.name().into(),
        host_limit_bytes: c.host_limit_bytes,
        weight: c.weight,
        priority_class: c.priority_class,
        wait_timeout_ns: c.wait_timeout_ns,
    }
}

/// Memory held outside the books ([`Held`]): the endpoint's side.
impl Endpoint {
    /// Keeps the VRAM of a tenant whose connection closes counted until its process
    /// exits, which the driver then says with [`Input::Exited`] (the serve loop watches
    /// processes; without it the memory would stay counted for ever).
    pub fn hold_until_exit(&mut self) {
        self.held.watch = true;
    }

    /// The processes whose VRAM is counted as held: the driver says when each exits.
    pub fn held_pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.held.pids()
    }

    /// `tenant` of process `pid` closes: the VRAM its chunks are in, and
    /// `unmovable_bytes` it said it holds outside them, stay counted until the process
    /// exits, unless the process is still a tenant through another connection (a
    /// process has one; the tests' tenants share theirs).
    fn hold_tenant(&mut self, pid: u32, tenant: TenantId, unmovable_bytes: u64) {
        let served = self
            .conns
            .values()
            .any(|c| c.pid == pid && c.tenant.is_some());
        let vram_bytes = match &self.manager {
            Some(m) if !served => held::vram_in_place(m, tenant) + unmovable_bytes,
            _ => 0,
        };
        self.hold(pid, vram_bytes);
    }

    /// Process `pid` holds `vram_bytes` the books do not: counted until it exits.
    fn hold(&mut self, pid: u32, vram_bytes: u64) {
        let waiting = self
            .conns
            .values()
            .flat_map(|c| c.pending.iter().map(|p| p.0));
        if let Some(line) = self.held.hold(pid, vram_bytes, waiting) {
            self.log(line);
        }
    }

    /// Process `pid` exited, or said hello to declare what it holds.
    fn exited(&mut self, pid: u32) {
        if let Some(line) = self.held.exited(pid) {
            self.log(line);
        }
    }

    /// A tenant says what it holds that the daemon cannot move (managed memory, buffers
    /// pinned for IPC): the manager counts it against the tenant and gives out that much
    /// less VRAM; `top` shows it.
    fn unmovable(&mut self, conn: ConnId, tenant: TenantId, managed_bytes: u64, pinned_bytes: u64) {
        let c = self.conns.get_mut(&conn).expect("present");
        (c.managed_bytes, c.pinned_bytes) = (managed_bytes, pinned_bytes);
        let m = self.manager.as_mut().expect("a tenant exists");
        m.held()
            .set_unmovable(tenant, managed_bytes.saturating_add(pinned_bytes));
    }

    /// A tenant reports the device's free memory.
    fn device_memory(&mut self, free_bytes: u64) {
        if let Some(m) = &self.manager {
            self.held.device_memory(free_bytes, m, self.now_ns);
        }
    }

    /// Hands the budget to the manager (after every input).
    fn rebudget(&mut self) {
        if let Some(m) = self.manager.as_mut() {
            self.held.rebudget(m, self.now_ns);
        }
    }

    /// Whether the grant of `buffer` for `request` was taken back to be placed again
    /// under the budget (memory was found held since its placement).
    fn placed_again(
        &mut self,
        tenant: TenantId,
        request: RequestId,
        buffer: BufferId,
        bytes: u64,
    ) -> bool {
        let m = self.manager.as_mut().expect("a tenant exists");
        let again = self
            .held
            .placed_again(m, tenant, request, buffer, bytes, self.now_ns);
        if again {
            self.log(format!(
                "{tenant}: an allocation placed before memory was found held is placed again"
            ));
        }
        again
    }

    /// A reconnecting process declares the buffers it holds: each is adopted where it
    /// is and answered with its new id, or not (then its VRAM is counted as held by the
    /// process until it exits).
    fn adopt(&mut self, conn: ConnId, tenant: TenantId, buffers: &[wire::HeldBuffer]) {
        let (pid, granularity) = (self.conns[&conn].pid, self.conns[&conn].granularity_bytes);
        let m = self.manager.as_mut().expect("a tenant exists");
        let mut refused = Vec::new();
        let mut unbooked_vram_bytes = 0;
        let answers: Vec<Option<u64>> = buffers
            .iter()
            .map(|b| match Held::adopt(m, tenant, granularity, b) {
                Ok(id) => Some(id.0),
                Err(why) => {
                    unbooked_vram_bytes += held::vram_part(b);
                    refused.push(why);
                    None
                }
            })
            .collect();
        for why in refused {
            self.log(format!("{tenant}: a declared buffer is not adopted: {why}"));
        }
        self.hold(pid, unbooked_vram_bytes);
        self.send(conn, DaemonMsg::Adopted { buffers: answers });
    }
}

#[cfg(test)]
mod tests;
