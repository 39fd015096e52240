//! Memory that is still held although no tenant of this daemon holds it: a process
//! the daemon dropped (it did not answer, it could not be written to, its connection
//! ended) may live on with its buffers mapped, a process that reconnects after a
//! restart holds buffers this daemon never granted, and processes outside the daemon
//! use the device too. The daemon gives out only what is really there: a dropped
//! process's VRAM stays counted until the process exits (the serve loop watches it and
//! says [`Input::Exited`](super::Input::Exited)), a reconnecting process declares its
//! buffers and they are adopted where they are, and the budget is at most what the
//! device's driver reports free plus what the tenants hold.

use std::collections::{BTreeMap, BTreeSet};

use gpuswap_core::{AllocRequest, BufferId, BufferKind, RequestId, TenantId};
use gpuswap_wire::{self as wire, DaemonMsg, HeldBuffer};

use super::{ConnId, Endpoint};

/// What the endpoint knows of memory held outside its books.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Whether a closed tenant's VRAM stays counted until its process exits: only a
    /// driver that watches processes and says when one exits turns it on (the serve
    /// loop), else the memory would stay counted for ever.
    watch: bool,
    /// VRAM held by processes the daemon does not serve, by pid.
    gone: BTreeMap<u32, u64>,
    /// What the device had free at the latest report, plus what the books held in VRAM
    /// then: the most the tenants can hold in all.
    device_room_bytes: Option<u64>,
    /// Requests that waited when memory was last found held: their placements were
    /// decided before the budget shrank, and are decided again if they are over it.
    stale: BTreeSet<RequestId>,
}

impl Endpoint {
    /// Keeps the VRAM of a tenant whose connection closes counted until its process
    /// exits, which the driver then says with [`Input::Exited`](super::Input::Exited).
    pub fn hold_until_exit(&mut self) {
        self.held.watch = true;
    }

    /// The processes whose VRAM is counted as held: the driver says when each exits.
    pub fn held_pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.held.gone.keys().copied()
    }

    /// VRAM held by processes the daemon does not serve.
    pub(crate) fn held_by_gone_bytes(&self) -> u64 {
        self.held.gone.values().sum()
    }

    /// `tenant` of process `pid` closes: the VRAM its chunks are in (not where the books
    /// plan them: a relocation it never carried out moved nothing) stays counted until
    /// the process exits, unless the process is still a tenant through another
    /// connection (a process has one; the tests' tenants share theirs).
    pub(super) fn hold_tenant(&mut self, pid: u32, tenant: TenantId) {
        if self
            .conns
            .values()
            .any(|c| c.pid == pid && c.tenant.is_some())
        {
            return;
        }
        let vram_bytes = self.manager.as_ref().map_or(0, |m| {
            m.buffers_of(tenant)
                .flat_map(|b| &b.chunks)
                .filter(|c| c.location == gpuswap_core::Location::Vram)
                .map(|c| c.bytes)
                .sum()
        });
        self.hold(pid, vram_bytes);
    }

    /// Process `pid` closes holding `vram_bytes`: its VRAM stays counted
    /// until the process exits, and the allocations waiting now are placed again if
    /// their placement counted on it.
    pub(super) fn hold(&mut self, pid: u32, vram_bytes: u64) {
        if !self.held.watch || vram_bytes == 0 {
            return;
        }
        *self.held.gone.entry(pid).or_default() += vram_bytes;
        self.log(format!(
            "pid {pid} may still hold {vram_bytes} bytes of VRAM: counted until it exits"
        ));
        self.held.stale = self
            .conns
            .values()
            .flat_map(|c| c.pending.iter().map(|p| p.0))
            .collect();
        self.rebudget();
    }

    /// Process `pid` exited (or says hello again, to declare what it holds): its VRAM
    /// is no longer counted as held.
    pub(super) fn exited(&mut self, pid: u32) {
        if let Some(bytes) = self.held.gone.remove(&pid) {
            self.log(format!(
                "pid {pid} no longer holds its {bytes} bytes of VRAM"
            ));
            self.rebudget();
        }
    }

    /// A tenant reports the device's free memory, as its driver says.
    pub(super) fn device_memory(&mut self, free_bytes: u64) {
        let Some(m) = self.manager.as_ref() else {
            return;
        };
        self.held.device_room_bytes = Some(free_bytes.saturating_add(m.vram_used_bytes()));
        self.rebudget();
    }

    /// The VRAM the daemon gives out: its own less what gone processes hold, and at most
    /// the device's room.
    pub(super) fn budget_bytes(&self, vram_bytes: u64) -> u64 {
        let own = vram_bytes.saturating_sub(self.held_by_gone_bytes());
        self.held
            .device_room_bytes
            .map_or(own, |room| own.min(room))
    }

    /// Hands the budget to the manager (after every input).
    pub(super) fn rebudget(&mut self) {
        let Some(vram_bytes) = self.manager.as_ref().map(|m| m.config().vram_bytes) else {
            return;
        };
        let budget = self.budget_bytes(vram_bytes);
        if let Some(m) = self.manager.as_mut() {
            m.set_vram_budget(budget);
        }
    }

    /// A grant of `buffer` for `request` is about to be sent: when its placement was
    /// decided before memory was found held and the books are now over the budget, the
    /// buffer is given back and the request placed again under the budget (its answer
    /// comes then). Returns whether it was.
    pub(super) fn placed_again(
        &mut self,
        tenant: TenantId,
        request: RequestId,
        buffer: BufferId,
        bytes: u64,
    ) -> bool {
        if !self.held.stale.remove(&request) {
            return false;
        }
        let budget = self
            .manager
            .as_ref()
            .map_or(0, |m| self.budget_bytes(m.config().vram_bytes));
        let m = self.manager.as_mut().expect("a tenant exists");
        if m.vram_used_bytes() <= budget || m.handle_free(tenant, buffer).is_err() {
            return false;
        }
        m.set_vram_budget(budget);
        m.handle_alloc(AllocRequest {
            request,
            tenant,
            bytes,
            kind: BufferKind::Device,
            priority: None,
            chunk_priorities: Vec::new(),
        });
        self.log(format!(
            "{tenant}: an allocation placed before memory was found held is placed again"
        ));
        true
    }

    /// A reconnecting process declares the buffers it holds: each is booked where it
    /// is and answered with its new id, or refused (another chunk size, bytes that are
    /// not whole granules, beyond what the tenant may hold), and then its VRAM is
    /// counted as held by the process until it exits.
    pub(super) fn adopt(&mut self, conn: ConnId, tenant: TenantId, buffers: &[HeldBuffer]) {
        let (pid, granularity) = (self.conns[&conn].pid, self.conns[&conn].granularity_bytes);
        let mut unbooked_vram_bytes = 0;
        let answers: Vec<Option<u64>> = buffers
            .iter()
            .map(|b| {
                let adopted = self.adopt_one(tenant, granularity, b);
                if let Err(why) = &adopted {
                    self.log(format!("{tenant}: a declared buffer is not adopted: {why}"));
                    unbooked_vram_bytes += vram_part(b);
                }
                adopted.ok().map(|id| id.0)
            })
            .collect();
        self.hold(pid, unbooked_vram_bytes);
        self.send(conn, DaemonMsg::Adopted { buffers: answers });
    }

    fn adopt_one(
        &mut self,
        tenant: TenantId,
        granularity_bytes: u64,
        b: &HeldBuffer,
    ) -> Result<BufferId, String> {
        let m = self.manager.as_mut().expect("a tenant exists");
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
        m.adopt_buffer(tenant, b.bytes, &locations)
    }
}

/// The bytes of a declared buffer in VRAM.
fn vram_part(b: &HeldBuffer) -> u64 {
    let vram_chunks: u64 = b
        .placement
        .iter()
        .filter(|r| r.location == wire::Location::Vram)
        .map(|r| u64::from(r.chunks))
        .sum();
    vram_chunks.saturating_mul(b.chunk_bytes).min(b.bytes)
}
