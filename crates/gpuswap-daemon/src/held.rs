//! Memory that is still held although no tenant of this daemon holds it: a process
//! the daemon dropped (it did not answer, it could not be written to, its connection
//! ended) may live on with its buffers mapped, a process that reconnects after a
//! restart holds buffers this daemon never granted, and processes outside the daemon
//! use the device too. The daemon gives out only what is really there: a dropped
//! process's VRAM stays counted until the process exits (the serve loop watches it),
//! a reconnecting process declares its buffers and they are adopted where they are,
//! and the budget is at most what the device's driver reports free plus what the
//! tenants hold. The endpoint keeps one [`Held`] and calls it at each of those events.

use std::collections::{BTreeMap, BTreeSet};

use gpuswap_core::{AllocRequest, BufferId, BufferKind, Manager, RequestId, TenantId};
use gpuswap_wire::{self as wire, HeldBuffer};

/// How long a report of the device's memory counts: three of the tenants' report
/// periods (a second). An older one is forgotten, so that the room it saw does not
/// outlive the tenants that would report a change (a newcomer reports before its
/// first allocation).
const REPORT_LIFE_NS: u64 = 3_000_000_000;

/// What the endpoint knows of memory held outside its books.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Whether a closed tenant's VRAM stays counted until its process exits: only a
    /// driver that watches processes and says when one exits turns it on (the serve
    /// loop), else the memory would stay counted for ever.
    pub watch: bool,
    /// VRAM held by processes the daemon does not serve, by pid.
    gone: BTreeMap<u32, u64>,
    /// What the device had free at the latest report, plus what the books held in VRAM
    /// then (the most the tenants can hold in all), and when it came.
    device_room: Option<(u64, u64)>,
    /// Requests that waited when memory was last found held: their placements were
    /// decided before the budget shrank, and are decided again if they are over it.
    stale: BTreeSet<RequestId>,
}

impl Held {
    /// The processes whose VRAM is counted as held.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.gone.keys().copied()
    }

    /// VRAM held by processes the daemon does not serve.
    pub fn by_gone_bytes(&self) -> u64 {
        self.gone.values().sum()
    }

    /// Process `pid` holds `vram_bytes` the daemon does not book (a tenant of it
    /// closed, or it declared buffers that were not adopted): counted until it exits,
    /// and `waiting`, the requests waiting now, are placed again before their grants if
    /// their placement counted on that memory. Returns the log line, if counted.
    pub fn hold(
        &mut self,
        pid: u32,
        vram_bytes: u64,
        waiting: impl Iterator<Item = RequestId>,
    ) -> Option<String> {
        if !self.watch || vram_bytes == 0 {
            return None;
        }
        *self.gone.entry(pid).or_default() += vram_bytes;
        self.stale = waiting.collect();
        Some(format!(
            "pid {pid} may still hold {vram_bytes} bytes of VRAM: counted until it exits"
        ))
    }

    /// Process `pid` exited (or says hello again, to declare what it holds): its VRAM
    /// is no longer counted as held. Returns the log line, if it was.
    pub fn exited(&mut self, pid: u32) -> Option<String> {
        let bytes = self.gone.remove(&pid)?;
        Some(format!(
            "pid {pid} no longer holds its {bytes} bytes of VRAM"
        ))
    }

    /// A tenant reports at `now_ns` the device's free memory, as its driver says,
    /// while `m` books what it books.
    pub fn device_memory(&mut self, free_bytes: u64, m: &Manager, now_ns: u64) {
        let room = free_bytes.saturating_add(m.vram_used_bytes());
        self.device_room = Some((room, now_ns));
    }

    /// The VRAM the daemon gives out at `now_ns`: its own less what gone processes
    /// hold, and at most the device's room while its report counts.
    fn budget_bytes(&self, m: &Manager, now_ns: u64) -> u64 {
        let own = m.config().vram_bytes.saturating_sub(self.by_gone_bytes());
        match self.device_room {
            Some((room, at)) if now_ns.saturating_sub(at) < REPORT_LIFE_NS => own.min(room),
            _ => own,
        }
    }

    /// Hands the budget at `now_ns` to the manager (after every input).
    pub fn rebudget(&self, m: &mut Manager, now_ns: u64) {
        let budget = self.budget_bytes(m, now_ns);
        m.held().set_vram_budget(budget);
    }

    /// A grant of `buffer` (`bytes`) for `tenant`'s `request` is about to be sent at
    /// `now_ns`: when
    /// its placement was decided before memory was found held and the books are now
    /// over the budget, the buffer is given back and the request placed again under the
    /// budget (its answer comes then). Returns whether it was.
    pub fn placed_again(
        &mut self,
        m: &mut Manager,
        tenant: TenantId,
        request: RequestId,
        buffer: BufferId,
        bytes: u64,
        now_ns: u64,
    ) -> bool {
        if !self.stale.remove(&request) {
            return false;
        }
        let budget = self.budget_bytes(m, now_ns);
        if m.vram_used_bytes() <= budget || m.handle_free(tenant, buffer).is_err() {
            return false;
        }
        m.held().set_vram_budget(budget);
        m.handle_alloc(AllocRequest {
            request,
            tenant,
            bytes,
            kind: BufferKind::Device,
            priority: None,
            chunk_priorities: Vec::new(),
        });
        true
    }

    /// Books a buffer `tenant` declares (its process reconnected), where it is: refused
    /// for another chunk size, bytes that are not whole granules of
    /// `granularity_bytes`, a placement of other chunks than the buffer has, more than
    /// the daemon manages in all for the tenant, or beyond its contract.
    pub fn adopt(
        m: &mut Manager,
        tenant: TenantId,
        granularity_bytes: u64,
        b: &HeldBuffer,
    ) -> Result<BufferId, String> {
        let chunk_bytes = m.config().chunk_bytes;
        if b.chunk_bytes != chunk_bytes || !b.bytes.is_multiple_of(granularity_bytes) {
            return Err(format!(
                "{} bytes in chunks of {} (the daemon's chunks are {chunk_bytes} bytes, the \
                 device's granules {granularity_bytes})",
                b.bytes, b.chunk_bytes
            ));
        }
        // Counted before the runs are spelled out chunk by chunk: a claim of more chunks
        // than the buffer has costs no memory.
        let declared: u64 = b.placement.iter().map(|r| u64::from(r.chunks)).sum();
        let chunks = wire::chunk_count(b.bytes, chunk_bytes);
        if declared != chunks {
            return Err(format!(
                "{declared} chunks declared for a buffer of {chunks}"
            ));
        }
        let most = m.config().vram_bytes.saturating_add(m.config().host_bytes);
        let usage = m.usage(tenant);
        if usage.vram_bytes + usage.host_bytes + b.bytes > most {
            return Err(format!(
                "{} bytes more than the {most} bytes the daemon manages in all",
                b.bytes
            ));
        }
        let locations: Vec<gpuswap_core::Location> = wire::chunks_of(&b.placement)
            .map(|l| match l {
                wire::Location::Vram => gpuswap_core::Location::Vram,
                wire::Location::Host => gpuswap_core::Location::Host,
            })
            .collect();
        m.held().adopt_buffer(tenant, b.bytes, &locations)
    }
}

/// The VRAM `tenant`'s chunks are in now (not where the books plan them: a relocation
/// it never carried out moved nothing).
pub(crate) fn vram_in_place(m: &Manager, tenant: TenantId) -> u64 {
    m.buffers_of(tenant)
        .map(gpuswap_core::Buffer::vram_bytes)
        .sum()
}

/// The bytes of a declared buffer in VRAM, in bytes: its last chunk is shorter when the
/// buffer is not whole chunks (a program's own handle of a size of its own, issue 41),
/// and counts at its length where it is in VRAM.
pub(crate) fn vram_part(b: &HeldBuffer) -> u64 {
    let vram_chunks: u64 = b
        .placement
        .iter()
        .filter(|r| r.location == wire::Location::Vram)
        .map(|r| u64::from(r.chunks))
        .sum();
    let last_in_vram = b
        .placement
        .iter()
        .rfind(|r| r.chunks > 0)
        .is_some_and(|r| r.location == wire::Location::Vram);
    let short_by = match b.bytes.checked_rem(b.chunk_bytes) {
        Some(rem) if rem > 0 && last_in_vram => b.chunk_bytes - rem,
        _ => 0,
    };
    vram_chunks
        .saturating_mul(b.chunk_bytes)
        .saturating_sub(short_by)
        .min(b.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn held(bytes: u64, runs: &[(u32, wire::Location)]) -> HeldBuffer {
        HeldBuffer {
            bytes,
            chunk_bytes: 4 * MIB,
            placement: runs
                .iter()
                .map(|&(chunks, location)| wire::Placement { chunks, location })
                .collect(),
        }
    }

    #[test]
    fn a_short_last_chunk_in_vram_counts_at_its_length() {
        use wire::Location::{Host, Vram};
        // 6 MiB in chunks of 4: 4 + 2.
        assert_eq!(vram_part(&held(6 * MIB, &[(1, Host), (1, Vram)])), 2 * MIB);
        assert_eq!(vram_part(&held(6 * MIB, &[(1, Vram), (1, Host)])), 4 * MIB);
        assert_eq!(vram_part(&held(6 * MIB, &[(2, Vram)])), 6 * MIB);
        assert_eq!(vram_part(&held(8 * MIB, &[(1, Host), (1, Vram)])), 4 * MIB);
        // Smaller than a chunk: one short chunk.
        assert_eq!(vram_part(&held(2 * MIB, &[(1, Vram)])), 2 * MIB);
    }
}
