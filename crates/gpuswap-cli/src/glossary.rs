//! What every figure in gpuswap's reports means: `gpuswap metrics` (and `gpuswap help
//! metrics`) print it; the README's glossary is the same text (a test keeps them equal).

/// The glossary, one entry per figure, in the order reports show them.
pub const GLOSSARY: &str = "\
Per tenant (gpuswap run; the --json field in brackets):
  total [total_ns]      time from the tenant's start to its end, waiting
                        included
  phase [phase_ns]      time in the app's measured phase (its main
                        computation); a program without one (a trace, a
                        fault log) is measured whole: phase = total
  slowdown              phase time over the same program's phase time alone on
                        the device with ample VRAM (native mode; mode uvm for
                        unified memory): 1 = no loss, 2 = twice as slow; empty
                        for a tenant that failed or runs endlessly
  vram peak             most VRAM the tenant held at once
  local / remote        kernel bytes served from VRAM / read or written over
                        the host link from chunks in host memory, summed over
                        the run (a kernel that reads a buffer ten times counts
                        it ten times)
  evicted / returned    bytes relocated from VRAM to host memory / back (mode
                        uvm: pages evicted / faulted in again after eviction)
  error                 why the tenant stopped early (FAILED in compare)
  contract              what the tenant is promised and limited to (its
                        [[tenant]] keys vram_guarantee, vram_limit, ...)
Relocations (gpuswap run):
  evictions, p50, max   the tenant's allocations that had to evict, and their
                        latency
  policy, dma setup, dma
                        where that latency went, summed: the victim policy's
                        run, the copy engines' setup, the transfers
  waiting               the rest: victims draining their queued work, queueing
  suspensions           times the tenant was suspended as a victim (or for a
                        return), not for its own allocation's eviction
  drain p50             time from a suspension request until its queued work
                        ended
  pause p50, pause max  time suspended while its chunks were copied
Kernel scheduling (a [scheduler] policy: PILOT's mfit, amfit, madvise):
  preemptions           the tenant's kernels the policy stopped to make room
  work lost             what the preempted kernels had run when they stopped
  held                  time the policy kept its kernels from launching
Unified memory (mode uvm) [uvm]:
  far faults            touches of pages not in VRAM (duplicates within a
                        fault batch merged)
  batches               fault batches the driver serviced with its faults
  pages in / pages out  4 KiB pages migrated to VRAM / evicted to host memory
  thrashed              pages faulted in again after their eviction
  unused / prefetched   pages the prefetcher brought that were evicted untouched
                        / all pages it brought without a fault
  remote touches        touches served over the link without migrating
                        (zero-copy, delayed migration, pinned pages)
  throttles / pins      the thrashing mitigation: batches that waited for
                        thrashing pages / pages it pinned in host memory
  fault stall           time the tenant's kernels waited on fault batches
  optimum in            pages in under Belady's bound on the same page stream
                        (optimum = true; - otherwise)
  allocation, pattern, plan, observations
                        per managed allocation: the access pattern detected
                        (streaming, regular, random, mixed, undecided), the
                        plan the runtime chose (configured follows the
                        settings) and the observations it rests on
Fault logs (a fault_log tenant) [fault_log]:
  source                logged: the driver's batches as recorded on the GPU;
                        simulated: the same faults as the simulation batched
  faults                faults (distinct pages) in the batches
  faults/batch mean, p50, p99
                        faults per batch: the mean and percentiles
VMs (scenarios with [[vm]] tables; DymGPU):
  slots                 high graphics memory slots the vGPU needs
  time, gpu time        the VM's life, and the GPU time it received
  fps                   frames per second over its life (- for jobs)
  moves                 times a reallocation moved it to other slots
  context switches      switches from one vGPU to another
  slot copies           private-table slots copied into the physical table
  entries copied        translation entries copied (low memory's included)
  cycles per switch     mean cycles a switch took, copies included
  reallocations         placements changed that moved at least one vGPU
  idle releases         idle vGPUs holding slots alone taken out of the
                        placement
System (gpuswap run, compare):
  makespan              when the last tenant ended
  STP                   system throughput: the sum of 1 / slowdown over the
                        tenants that finished (n tenants without loss = n)
  ANTT                  average normalized turnaround time: the mean slowdown
                        of the tenants that finished (1 = no loss; lower is
                        better)
  Jain(slowdown)        Jain's fairness index of the finished tenants'
                        slowdowns, (sum x)^2 / (n * sum x^2): 1 when all are
                        equal, 1/n when one bears everything
  Jain(VRAM)            Jain's index of each tenant's mean VRAM over its life
  tenants failed        tenants that did not finish (out of memory, refused);
                        the figures over finished tenants say \"k of n\" when
                        some failed
  worst slowdown        the largest slowdown among the tenants that finished
                        (compare)
  link utilization      bytes each link direction moved over what it could
                        have moved in the run (0 idle, 100 % saturated)
Sweeps (summary.csv): per grid point, each figure's mean, standard deviation,
minimum and maximum over its seeds (METRIC.mean, .std, .min, .max); runs that
failed are counted in failed, never averaged in; tenant_failed counts runs in
which a tenant failed, and tenants_failed (results.csv too) the tenants that
failed. A figure over no finished tenant (STP, ANTT, Jain) is empty, never 0.
";
