//! A driver that answers at once, shared by the decision-path bench and the
//! steady-allocation test (`#[path]`-included by both).

use gpuswap_core::{
    Action, AllocRequest, BufferId, BufferKind, Dma, Execution, Manager, ManagerConfig,
    PolicySettings, Reply, RequestId, TenantId,
};

/// A gpuswap-policy manager over `vram_bytes` of VRAM in chunks of `chunk_bytes`.
pub fn config(vram_bytes: u64, chunk_bytes: u64) -> ManagerConfig {
    ManagerConfig {
        vram_bytes,
        host_bytes: 1 << 40,
        chunk_bytes,
        policy: PolicySettings::named("gpuswap"),
        return_interval_ns: 1_000_000_000,
        seed: 1,
        scheduling: Default::default(),
        gpu_time: Default::default(),
        idle: Default::default(),
    }
}

/// A device-buffer request of `bytes` by `tenant`.
pub fn request(id: u64, tenant: u32, bytes: u64) -> AllocRequest {
    AllocRequest {
        request: RequestId(id),
        tenant: TenantId(tenant),
        bytes,
        kind: BufferKind::Device,
        priority: None,
        chunk_priorities: Vec::new(),
    }
}

/// Plays the driver at once (suspends, copies) and returns the buffer a grant names.
pub fn drive(m: &mut Manager) -> Option<BufferId> {
    let mut granted = None;
    while let Some(action) = m.poll_action() {
        match action {
            Action::Execution(Execution::Suspend { tenant, .. }) => {
                m.handle_suspended(tenant).unwrap()
            }
            Action::Dma(Dma::Copy { copy, .. }) => m.handle_copy_done(copy).unwrap(),
            Action::Reply(Reply::Grant { buffer, .. }) => granted = Some(buffer),
            _ => {}
        }
    }
    granted
}

/// A manager under `config`, whose VRAM is `chunks` chunks, with `tenants` tenants
/// filling it with buffers of up to 32 chunks (64 MiB of 2 MiB chunks, as frameworks'
/// caching allocators ask). Returns the manager and the last request number used.
pub fn fill(config: ManagerConfig, tenants: u64, chunks: u64) -> (Manager, u64) {
    let chunk_bytes = config.chunk_bytes;
    let mut m = Manager::new(config);
    let mut id = 0;
    for t in 0..tenants {
        let mut left = chunks / tenants;
        while left > 0 {
            let n = left.min(32);
            id += 1;
            m.handle_alloc(request(id, t as u32, n * chunk_bytes));
            drive(&mut m).expect("fits");
            left -= n;
        }
    }
    (m, id)
}

/// One step of the daemon's steady path: allocate one chunk into full VRAM (an
/// eviction), free it, and let the return check at `now_ns` bring a chunk back. The
/// books end as they began.
pub fn evict_free_return(m: &mut Manager, id: u64, chunk_bytes: u64, now_ns: u64) {
    m.handle_alloc(request(id, 0, chunk_bytes));
    let buffer = drive(m).expect("granted");
    m.handle_free(TenantId(0), buffer).unwrap();
    drive(m);
    m.handle_timeout(now_ns);
    drive(m);
}
