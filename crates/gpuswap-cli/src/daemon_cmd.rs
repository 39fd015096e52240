//! `gpuswap daemon` (gpuswapd, GPUswap for real processes) and `gpuswap top` (its
//! tenants, live).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use gpuswap_core::gpu_time::GpuTime;
use gpuswap_core::{AtLimit, Contract, PolicySettings};
use gpuswap_daemon::identity::{Contracts, ContractsDir, ProcessContract};
use gpuswap_daemon::{
    DEFAULT_MAX_CONNECTIONS, DaemonConfig, check_policy, observe, serve, socket_path,
};
use gpuswap_sim::units::{format_bytes, parse_bytes};
use gpuswap_wire::{ContractRow, Snapshot, TenantRow};

use crate::gpu_time_keys;
use crate::table::{self, Column};

/// `gpuswap daemon`'s flags.
#[derive(Args)]
pub struct DaemonArgs {
    /// The Unix socket to listen on (created with mode 0600). Default: with --device,
    /// $XDG_RUNTIME_DIR/gpuswap/UUID.sock (/tmp/gpuswap-UID/UUID.sock without it;
    /// /run/gpuswap/UUID.sock for root), where a process of that GPU finds it; else
    /// GPUSWAP_SOCKET, else $XDG_RUNTIME_DIR/gpuswap.sock, else
    /// /tmp/gpuswap-UID/gpuswap.sock (in a folder of the user's own, made 0700).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// The GPU to serve, by its UUID (`nvidia-smi -L`: GPU-xxxxxxxx-...) or its index as
    /// the CUDA driver numbers it (after CUDA_VISIBLE_DEVICES; the daemon loads the
    /// driver, GPUSWAP_REAL_LIBCUDA or libcuda.so.1, to learn its UUID): one daemon per
    /// GPU. Processes find it by their device's UUID, and a process of another GPU is
    /// refused. Default: whichever device its processes use, at the default socket.
    #[arg(long, value_name = "UUID|INDEX", value_parser = device_arg)]
    device: Option<DeviceArg>,
    /// VRAM to manage (e.g. 70GiB). Default: nine tenths of what the first process's
    /// device reports, the rest left to CUDA contexts and unmanaged memory.
    #[arg(long, value_parser = bytes)]
    vram: Option<u64>,
    /// Host memory evicted chunks may fill. Default: half of the machine's memory.
    #[arg(long, value_parser = bytes)]
    host: Option<u64>,
    /// Chunk size: a multiple of the device's allocation granularity (2 MiB on current
    /// GPUs).
    #[arg(long, default_value = "2MiB", value_parser = bytes)]
    chunk_size: u64,
    /// The manager's mode: gpuswap, fcfs, static or native (modes that need kernels'
    /// page faults or reference bits cannot run on a real GPU).
    #[arg(long, default_value = "gpuswap")]
    mode: String,
    /// A parameter of the mode, KEY=VALUE (see `gpuswap policies`), or how tenants share
    /// the GPU's time: gpu_time=auto|concurrent|turns (default auto in mode gpuswap:
    /// share or take turns by measured progress), quantum=auto|DURATION,
    /// handover_after=DURATION (turns: one process holds the GPU while the others wait,
    /// when their memory does not fit together), remote_cost=NUMBER (a remote read
    /// against a local one; auto shares first below 16; default: measured by the first
    /// process), idle=demote|keep and
    /// demote_after=DURATION (an idle process gives its VRAM back under pressure,
    /// default after 5s); repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// How often evicted data is checked for a way back into free VRAM.
    #[arg(long, default_value = "50ms", value_parser = crate::limits::duration)]
    return_interval: u64,
    /// Memory contracts by process name: a TOML file of `[process.NAME]` tables with
    /// the tenant contract keys (vram_guarantee, vram_limit, memory_limit, at_limit,
    /// host_limit, weight, priority_class; see `gpuswap keys`), and who may take each:
    /// `uids = [...]` and `cgroup = "PREFIX"`, checked against what the kernel says of
    /// the process (without them: the daemon's own user's processes only). A process
    /// gives its name in GPUSWAP_TENANT_NAME (else its program's name); others get no
    /// contract.
    #[arg(long, value_name = "FILE")]
    contracts: Option<PathBuf>,
    /// A folder of contracts files (`*.toml`, as --contracts), one per job, written
    /// by a scheduler's prolog: read again at SIGHUP and when a file changes (looked
    /// at every 2 s and before each process's hello). It must belong to the daemon's
    /// user (root, for a system daemon), and its group and others may not write in it.
    #[arg(long, value_name = "DIR")]
    contracts_dir: Option<PathBuf>,
    /// Check a contracts file (with the --mode, --set and --vram given), print who
    /// may take each of its contracts, and exit: non-zero when it is wrong.
    #[arg(long, value_name = "FILE")]
    check_contracts: Option<PathBuf>,
    /// The most connections served at once (processes, `gpuswap top`s, connections
    /// yet to say hello); one more is refused with a message.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Serve other users: the socket is made 0660 and given to this group (a name in
    /// /etc/group or a number), whose members may connect, whatever their uid. Their
    /// interposers must trust the daemon's user (GPUSWAP_DAEMON_USER) unless it is root.
    #[arg(long, value_name = "GROUP")]
    socket_group: Option<String>,
    /// Serve metrics (OpenMetrics text, for Prometheus) over HTTP at ADDR's
    /// `/metrics`: VRAM and host memory per tenant and in all, moves, waits, turns,
    /// refusals, the snapshot's generation (`127.0.0.1:9402`; mind who can reach it).
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    /// How log lines are written to standard error: text (a time stamp, the level,
    /// the line) or json (one object a line). RUST_LOG filters them (`warn`, `info`:
    /// the default; tracing's filter syntax).
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Print nothing but errors.
    #[arg(long)]
    quiet: bool,
}

/// `gpuswap top`'s flags.
#[derive(Args)]
pub struct TopArgs {
    /// The daemon's socket. Default: GPUSWAP_SOCKET, else every local daemon (each
    /// GPU's, $XDG_RUNTIME_DIR/gpuswap/ and /run/gpuswap/, and the default socket's),
    /// one table each, like nvidia-smi.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Print the daemon's state once as JSON and exit.
    #[arg(long)]
    json: bool,
    /// Refresh period.
    #[arg(long, default_value = "1s", value_parser = crate::limits::duration)]
    interval: u64,
    /// Refreshes before exiting (default: until interrupted).
    #[arg(long)]
    iterations: Option<u64>,
}

/// `--device`: a GPU's UUID, or its index as the CUDA driver numbers the GPUs it shows.
#[derive(Clone)]
enum DeviceArg {
    Uuid(String),
    Index(u16),
}

fn device_arg(text: &str) -> Result<DeviceArg, String> {
    match text.parse::<u16>() {
        Ok(index) => Ok(DeviceArg::Index(index)),
        Err(_) => gpuswap_wire::parse_uuid(text).map(DeviceArg::Uuid),
    }
}

impl DeviceArg {
    /// The GPU's UUID: an index is looked up in the driver.
    fn uuid(&self) -> Result<String, String> {
        match self {
            DeviceArg::Uuid(uuid) => Ok(uuid.clone()),
            DeviceArg::Index(index) => {
                gpu_index::uuid(i32::from(*index)).map_err(|e| format!("--device {index}: {e}"))
            }
        }
    }
}

/// The one lookup the daemon asks of the CUDA driver: which GPU an index names. The
/// driver is loaded as the interposer loads it (`GPUSWAP_REAL_LIBCUDA`, else
/// `libcuda.so.1`), so the index counts the GPUs the daemon's processes see: the
/// driver applies `CUDA_VISIBLE_DEVICES` itself. `cuInit` creates no context, so the
/// daemon holds no GPU memory for it.
mod gpu_index {
    use std::ffi::{CStr, CString, c_int, c_uint, c_void};

    /// `cuInit`, `cuDeviceGetCount`, `cuDeviceGet` and `cuDeviceGetUuid_v2` as cuda.h
    /// declares them (a `CUresult` is an int, a `CUdevice` an int, a `CUuuid` 16 bytes).
    type Init = unsafe extern "C" fn(c_uint) -> c_int;
    type Count = unsafe extern "C" fn(*mut c_int) -> c_int;
    type Get = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
    type Uuid = unsafe extern "C" fn(*mut [u8; 16], c_int) -> c_int;

    /// The last `dlopen` or `dlsym` error.
    fn dl_error() -> String {
        // SAFETY: dlerror returns null or a NUL-terminated string valid until the next
        // dl call on this thread, copied at once.
        let text = unsafe { libc::dlerror() };
        if text.is_null() {
            return "no reason given".into();
        }
        // SAFETY: as above.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }

    /// The UUID of the GPU of index `index`.
    pub fn uuid(index: c_int) -> Result<String, String> {
        let library =
            std::env::var("GPUSWAP_REAL_LIBCUDA").unwrap_or_else(|_| "libcuda.so.1".into());
        let give_uuid = "give the GPU's UUID instead (`nvidia-smi -L` lists them)";
        let name = CString::new(library.as_str())
            .map_err(|_| format!("GPUSWAP_REAL_LIBCUDA={library:?} is no library name"))?;
        // SAFETY: a NUL-terminated name; the library is the CUDA driver, whose
        // initializers expect nothing of the caller.
        let lib = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            return Err(format!(
                "cannot load the CUDA driver {library} to find GPU {index} ({}); {give_uuid}",
                dl_error()
            ));
        }
        let find = |symbol: &CStr| -> Result<*mut c_void, String> {
            // SAFETY: a live handle and a NUL-terminated name.
            let address = unsafe { libc::dlsym(lib, symbol.as_ptr()) };
            match address.is_null() {
                true => Err(format!("the CUDA driver {library} has no {symbol:?}")),
                false => Ok(address),
            }
        };
        // SAFETY: the driver's functions of these names have these signatures (cuda.h).
        let (init, count, get, uuid) = unsafe {
            (
                std::mem::transmute::<*mut c_void, Init>(find(c"cuInit")?),
                std::mem::transmute::<*mut c_void, Count>(find(c"cuDeviceGetCount")?),
                std::mem::transmute::<*mut c_void, Get>(find(c"cuDeviceGet")?),
                std::mem::transmute::<*mut c_void, Uuid>(find(c"cuDeviceGetUuid_v2")?),
            )
        };
        // SAFETY: flags must be 0.
        let rc = unsafe { init(0) };
        if rc != 0 {
            return Err(format!(
                "the CUDA driver {library} does not start (cuInit: CUDA error {rc}), so it \
                 names no GPU {index}; {give_uuid}"
            ));
        }
        let mut devices: c_int = 0;
        // SAFETY: `devices` is valid for a write.
        if unsafe { count(&mut devices) } != 0 {
            devices = 0;
        }
        let mut device: c_int = 0;
        // SAFETY: `device` is valid for a write; the driver checks the index.
        if unsafe { get(&mut device, index) } != 0 {
            let visible = std::env::var("CUDA_VISIBLE_DEVICES")
                .map(|v| format!(" (CUDA_VISIBLE_DEVICES={v})"))
                .unwrap_or_default();
            return Err(format!(
                "there is no GPU {index}: the CUDA driver shows {devices}{visible}, numbered \
                 from 0"
            ));
        }
        let mut bytes = [0u8; 16];
        // SAFETY: `bytes` is a CUuuid, valid for a write.
        let rc = unsafe { uuid(&mut bytes, device) };
        if rc != 0 {
            return Err(format!(
                "the CUDA driver does not tell GPU {index}'s UUID (CUDA error {rc}); {give_uuid}"
            ));
        }
        Ok(gpuswap_wire::uuid_text(&bytes))
    }
}

fn bytes(text: &str) -> Result<u64, String> {
    parse_bytes(text).map_err(|e| e.to_string())
}

/// The machine's memory, from /proc/meminfo.
fn machine_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The remote-read cost the daemon's automatic choice starts from until the first
/// tenant has measured it (`Welcome::probe_remote`) or when the measurement fails, unless
/// one is given (`--set remote_cost=`): our H200's, streaming remote reads at about 20 GB/s (19-21
/// GB/s measured, docs/real-gpu.md) against HBM3e's 4.8 TB/s (NVIDIA's H200 datasheet).
/// PCIe's order of magnitude: turns first.
const ASSUMED_REMOTE_COST: f64 = 240.0;

/// How the daemon's log lines are written.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum LogFormat {
    /// A time stamp, the level and the line.
    Text,
    /// One JSON object a line (`timestamp`, `level`, `fields.message`).
    Json,
}

/// Sends the daemon's log (tracing's events) to standard error in `format`, filtered
/// by RUST_LOG (default `info`). A failed write loses the line, never the daemon (one
/// that outlived its terminal).
fn init_logs(format: LogFormat) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Err(_) => EnvFilter::new("info"),
        Ok(text) => EnvFilter::try_new(&text)
            .map_err(|e| format!("RUST_LOG={text:?}: {e} (for instance RUST_LOG=warn)"))?,
    };
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        // Its own report of a failed write goes to the same failing standard error,
        // through eprintln!, which panics there.
        .log_internal_errors(false);
    let installed = match format {
        LogFormat::Text => logs.try_init(),
        LogFormat::Json => logs.json().try_init(),
    };
    // A second daemon in one process (tests) keeps the first one's log.
    drop(installed);
    Ok(())
}

/// Runs the daemon until it is killed; errors are for the user.
pub fn daemon(args: &DaemonArgs) -> Result<(), String> {
    let mut policy = PolicySettings::new(&args.mode, 1).map_err(|e| e.to_string())?;
    // The GPU-time keys are the daemon's, the others the mode's parameters.
    let mut gpu_time: gpu_time_keys::Values = [None; 6];
    for pair in &args.set {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("--set {pair:?}: expected KEY=VALUE"))?;
        if let Some(at) = gpu_time_keys::KEYS.iter().position(|k| *k == key.trim()) {
            gpu_time[at] = Some(value.trim());
            continue;
        }
        policy = policy
            .set(key.trim(), value.trim())
            .map_err(|e| format!("--set {pair:?}: {e}"))?;
    }
    let defaults = gpu_time_keys::Defaults {
        gpu_time: if policy.name() == "gpuswap" {
            "auto"
        } else {
            "concurrent"
        },
        remote_cost: ASSUMED_REMOTE_COST,
    };
    let cost_given = gpu_time[gpu_time_keys::REMOTE_COST].is_some();
    let (gpu_time, idle) = gpu_time_keys::settings(gpu_time, defaults)
        .map_err(|(key, message)| format!("--set {key}: {message}"))?;
    check_policy(&policy)?;
    if let Some(path) = &args.check_contracts {
        let tables = crate::contract_keys::load_contracts(path, &policy, args.vram)?;
        return crate::stdout::write(&check_text(path, &tables, gpuswap_daemon::euid()))
            .map_err(|e| e.to_string());
    }
    if args.chunk_size == 0 || args.return_interval == 0 {
        return Err("--chunk-size and --return-interval must be positive".into());
    }
    if args.vram == Some(0) {
        return Err(
            "--vram must be above 0 (leave it out to manage nine tenths of the device)".into(),
        );
    }
    let memory = machine_memory();
    if let (Some(host), Some(memory)) = (args.host, memory)
        && host > memory
    {
        return Err(format!(
            "--host {} is beyond this machine's memory ({}): evicted data could not fit",
            format_bytes(host),
            format_bytes(memory)
        ));
    }
    if args.max_connections == 0 {
        return Err("--max-connections must be positive".into());
    }
    let fixed = match &args.contracts {
        None => Vec::new(),
        Some(path) => crate::contract_keys::load_contracts(path, &policy, args.vram)?,
    };
    let dir = args.contracts_dir.as_ref().map(|path| {
        let (policy, vram) = (policy.clone(), args.vram);
        ContractsDir {
            path: path.clone(),
            load: Arc::new(move |file: &std::path::Path| {
                crate::contract_keys::load_contracts(file, &policy, vram)
            }),
        }
    });
    let contracts = Contracts::new(fixed, dir);
    let device = args.device.as_ref().map(DeviceArg::uuid).transpose()?;
    let config = DaemonConfig {
        socket: match (&args.socket, &device) {
            (None, Some(uuid)) => gpuswap_daemon::device_socket(uuid),
            (flag, _) => socket_path(flag.clone()),
        },
        vram_bytes: args.vram,
        host_bytes: args.host.or(memory.map(|m| m / 2)).unwrap_or(16 << 30),
        chunk_bytes: args.chunk_size,
        policy,
        return_interval_ns: args.return_interval,
        verbose: !args.quiet,
        contracts,
        gpu_time,
        idle,
        socket_group: args
            .socket_group
            .as_deref()
            .map(gpuswap_daemon::group_id)
            .transpose()
            .map_err(|e| format!("--socket-group: {e}"))?,
        metrics_listen: args.metrics_listen.clone(),
        max_connections: args.max_connections,
        // The first tenants measure the link unless the operator gave its cost.
        probe_remote: matches!(gpu_time, GpuTime::Auto(_)) && !cost_given,
        device_uuid: device,
    };
    init_logs(args.log_format)?;
    let verbose = config.verbose;
    let stop = gpuswap_daemon::stop_on_signals();
    serve(config, &stop).map_err(|e| e.to_string())?;
    if verbose {
        tracing::info!("stopped by a signal; connections closed, socket removed");
    }
    Ok(())
}

/// What `--check-contracts` prints of a good file: each contract, its terms and who
/// may take it, from a daemon of uid `euid`.
fn check_text(path: &std::path::Path, tables: &[ProcessContract], euid: u32) -> String {
    let mut out = format!(
        "{}: {} contract(s), as a daemon of uid {euid} would give them\n",
        path.display(),
        tables.len()
    );
    for t in tables {
        let terms = match crate::contract_keys::describe(&t.contract) {
            text if text.is_empty() => "the default terms".to_owned(),
            text => text,
        };
        out += &format!(
            "  [process.{:?}] {terms}: to {} that claim the name {:?}\n",
            t.name,
            t.who(euid),
            t.name
        );
    }
    out
}

/// `gpuswap top`: the table (or JSON), refreshed until interrupted. Without `--socket`
/// or GPUSWAP_SOCKET it shows every local daemon, one table each under its GPU's UUID.
pub fn top(args: &TopArgs) -> Result<(), String> {
    let sockets = match (&args.socket, std::env::var_os(gpuswap_wire::SOCKET_ENV)) {
        (None, None) => match gpuswap_daemon::local_sockets() {
            found if found.is_empty() => vec![socket_path(None)],
            found => found,
        },
        (flag, _) => vec![socket_path(flag.clone())],
    };
    if args.json {
        let [socket] = sockets.as_slice() else {
            return Err(format!(
                "--json shows one daemon, and {} are running: name one with --socket ({})",
                sockets.len(),
                sockets
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        let snap = observe(socket).map_err(|e| e.to_string())?;
        let text = serde_json::to_string_pretty(&snap).map_err(|e| e.to_string())?;
        return crate::stdout::write(&(text + "\n")).map_err(|e| e.to_string());
    }
    let mut shown = 0;
    loop {
        let several = sockets.len() > 1;
        let mut text = String::new();
        for socket in &sockets {
            if several {
                text += &format!("== {}\n", socket.display());
            }
            match observe(socket) {
                Ok(snap) => text += &table(&snap),
                Err(e) if several => text += &format!("{e}\n\n"),
                Err(e) => return Err(e.to_string()),
            }
        }
        // Clear the screen and home the cursor, as top does, when it is a terminal.
        let clear = if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            "\x1b[H\x1b[2J"
        } else {
            ""
        };
        crate::stdout::write(&format!("{clear}{text}")).map_err(|e| e.to_string())?;
        shown += 1;
        if args.iterations.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_nanos(args.interval));
    }
}

/// The VRAM the daemon gives out, when less than it manages: what processes it no
/// longer serves still hold, or what the device has free says so.
fn held_text(snap: &Snapshot) -> String {
    if snap.held_by_gone_bytes == 0
        && (snap.vram_budget_bytes == 0 || snap.vram_budget_bytes >= snap.vram_bytes)
    {
        return String::new();
    }
    format!(
        "VRAM given out now {}: {} held by processes no longer served (until they exit), \
         the rest by what the device has free\n\n",
        format_bytes(snap.vram_budget_bytes),
        format_bytes(snap.held_by_gone_bytes),
    )
}

/// The daemon's state as a table, one row per tenant.
pub fn table(snap: &Snapshot) -> String {
    let device = match snap.device_uuid.as_str() {
        "" => String::new(),
        uuid => format!(" of {uuid}"),
    };
    let mut out = format!(
        "gpuswapd{device}: mode {}, chunk {}, up {:.0} s, {} tenant(s) served\n\
         VRAM {} of {} used, host {} of {} used\n\n",
        snap.mode,
        format_bytes(snap.chunk_bytes),
        snap.uptime_s,
        snap.tenants_served,
        format_bytes(snap.vram_used_bytes),
        format_bytes(snap.vram_bytes),
        format_bytes(snap.host_used_bytes),
        format_bytes(snap.host_bytes),
    );
    out += &held_text(snap);
    out += &turns_text(snap);
    let contract = |t: &TenantRow| contract_text(&t.contract);
    let mut columns: Vec<Column<'_, TenantRow>> = Vec::new();
    columns.extend_from_slice(&[
        ("tenant", &|t| t.tenant.to_string()),
        ("pid", &|t| t.pid.to_string()),
        ("name", &|t| shown_name(&t.name)),
        ("buffers", &|t| t.buffers.to_string()),
        ("vram", &|t| format_bytes(t.vram_bytes)),
        ("host", &|t| format_bytes(t.host_bytes)),
        ("evicted", &|t| format_bytes(t.evicted_bytes)),
        ("returned", &|t| format_bytes(t.returned_bytes)),
        ("moves", &|t| {
            format!("{} ({:.1} ms)", t.relocations, t.relocation_ns as f64 / 1e6)
        }),
        ("waits", &|t| {
            let now = match t.waiting_ns {
                0 => String::new(),
                ns => format!(", one waiting {:.1} s", ns as f64 / 1e9),
            };
            format!("{} ({:.1} ms{now})", t.waits, t.wait_ns as f64 / 1e6)
        }),
        ("suspended", &|t| {
            if t.suspended { "yes" } else { "" }.to_owned()
        }),
    ]);
    // Memory the daemon cannot move, shown only where a tenant holds some.
    if snap.tenants.iter().any(|t| t.managed_bytes > 0) {
        columns.push(("managed by the driver", &|t| format_bytes(t.managed_bytes)));
    }
    if snap.tenants.iter().any(|t| t.pinned_bytes > 0) {
        columns.push(("pinned (IPC)", &|t| format_bytes(t.pinned_bytes)));
    }
    if !snap.choice.is_empty() {
        columns.push(("turn", &|t| t.turn.clone()));
    }
    if snap.gpu_time == "auto" {
        columns.push(("slowdown", &|t| match t.slowdown {
            0.0 => String::new(),
            x => format!("{x:.2}x"),
        }));
    }
    if snap.tenants.iter().any(|t| !contract(t).is_empty()) {
        columns.push(("contract", &contract));
    }
    out += &table::columns(&snap.tenants, &columns, table::terminal_width());
    if snap.tenants.is_empty() {
        out += "(no tenant connected)\n";
    }
    out
}

/// A tenant's name as `top` shows it: a process names itself, so control characters
/// and other unprintable ones (a terminal's escape sequences, bidirectional overrides)
/// are written escaped, as Rust's `escape_debug` writes them, never as they are.
fn shown_name(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '\\' | '"' | '\'' => c.to_string(),
            _ => c.escape_debug().to_string(),
        })
        .collect()
}

/// Under turns or auto: the automatic choice, who holds the GPU, the handovers, and
/// the bulk moves' speed (the latest, and the range over those the snapshot lists); ""
/// otherwise.
fn turns_text(snap: &Snapshot) -> String {
    if snap.choice.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    if snap.gpu_time == "auto" {
        out += &format!(
            "auto: {} now, {} switches (each logged with its reason)\n",
            snap.choice, snap.switches
        );
    }
    let holder = snap
        .holder
        .map_or("nobody".to_owned(), |t| format!("tenant {t}"));
    out += &format!(
        "turns: {holder} holds the GPU, {} handovers, {} moved in bulk\n",
        snap.handovers,
        format_bytes(snap.batch_moved_bytes)
    );
    let speeds = snap.batches.iter().map(|b| b.gb_per_s);
    if let (Some(last), Some(min), Some(max)) = (
        snap.batches.last(),
        speeds.clone().reduce(f64::min),
        speeds.reduce(f64::max),
    ) {
        out += &format!(
            "bulk moves: the latest {} at {:.1} GB/s; the last {}: {min:.1} to {max:.1} GB/s\n",
            format_bytes(last.bytes),
            last.gb_per_s,
            snap.batches.len()
        );
    }
    out + "\n"
}

/// A snapshot's contract in words ("" for none).
fn contract_text(row: &ContractRow) -> String {
    let contract = Contract {
        vram_guarantee_bytes: row.vram_guarantee_bytes,
        vram_limit_bytes: row.vram_limit_bytes,
        memory_limit_bytes: row.memory_limit_bytes,
        at_limit: AtLimit::from_name(&row.at_limit).unwrap_or_default(),
        host_limit_bytes: row.host_limit_bytes,
        weight: row.weight,
        priority_class: row.priority_class,
        wait_timeout_ns: row.wait_timeout_ns,
    };
    crate::contract_keys::describe(&contract)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuswap_wire::BatchRow;

    /// A process names itself: control characters in its name (a terminal's escape
    /// sequences among them) are shown escaped, never written to the terminal.
    #[test]
    fn top_escapes_control_characters_in_names() {
        let snap = Snapshot {
            tenants: vec![TenantRow {
                name: "evil\x1b[2J\x1b]0;owned\x07\u{9b}31m\nname\u{202e}'\"\\".into(),
                ..TenantRow::default()
            }],
            ..Snapshot::default()
        };
        let text = table(&snap);
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(
            text.contains(r#"evil\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}31m\nname\u{202e}'"\"#),
            "{text}"
        );
    }

    #[test]
    fn top_shows_memory_held_by_processes_no_longer_served() {
        let mut snap = Snapshot {
            vram_bytes: 64 << 20,
            vram_budget_bytes: 64 << 20,
            ..Snapshot::default()
        };
        assert!(!table(&snap).contains("given out"));
        (snap.held_by_gone_bytes, snap.vram_budget_bytes) = (34 << 20, 30 << 20);
        let text = table(&snap);
        assert!(
            text.contains("VRAM given out now 30.0 MiB: 34.0 MiB held"),
            "{text}"
        );
    }

    /// Memory the daemon cannot move has its columns only where a tenant holds some.
    #[test]
    fn top_shows_managed_and_pinned_memory_only_where_held() {
        let mut snap = Snapshot {
            tenants: vec![TenantRow {
                name: "a".into(),
                ..TenantRow::default()
            }],
            ..Snapshot::default()
        };
        let text = table(&snap);
        assert!(!text.contains("managed by the driver") && !text.contains("pinned"));
        (snap.tenants[0].managed_bytes, snap.tenants[0].pinned_bytes) = (8 << 20, 2 << 20);
        let text = table(&snap);
        assert!(text.contains("managed by the driver"), "{text}");
        assert!(
            text.contains("pinned (IPC)") && text.contains("8.0 MiB"),
            "{text}"
        );
    }

    #[test]
    fn top_shows_turns_and_bulk_speeds_only_under_turns() {
        let mut snap = Snapshot {
            mode: "gpuswap".into(),
            chunk_bytes: 2 << 20,
            tenants: vec![TenantRow {
                tenant: 1,
                turn: "held".into(),
                ..TenantRow::default()
            }],
            ..Snapshot::default()
        };
        assert!(!table(&snap).contains("turns:"));
        assert!(!table(&snap).contains("held"));
        snap.gpu_time = "turns".into();
        snap.choice = "turns".into();
        snap.holder = Some(0);
        snap.handovers = 3;
        snap.batch_moved_bytes = 3 << 30;
        snap.batches = [20.5, 31.0, 27.25]
            .into_iter()
            .map(|gb_per_s| BatchRow {
                bytes: 512 << 20,
                gb_per_s,
                ..BatchRow::default()
            })
            .collect();
        let text = table(&snap);
        assert!(
            text.contains("turns: tenant 0 holds the GPU, 3 handovers, 3.0 GiB moved in bulk"),
            "{text}"
        );
        assert!(
            text.contains("the latest 512.0 MiB at 27.2 GB/s; the last 3: 20.5 to 31.0 GB/s"),
            "{text}"
        );
        assert!(text.contains("held"), "{text}");
        assert!(
            !text.contains("auto:") && !text.contains("slowdown"),
            "{text}"
        );
        snap.gpu_time = "auto".into();
        snap.choice = "share".into();
        snap.switches = 2;
        snap.tenants[0].slowdown = 1.734;
        let text = table(&snap);
        assert!(
            text.contains("auto: share now, 2 switches (each logged with its reason)"),
            "{text}"
        );
        assert!(
            text.contains("slowdown") && text.contains("1.73x"),
            "{text}"
        );
    }
}
