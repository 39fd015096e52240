//! What every figure in gpuswap's reports means: `gpuswap metrics` (and `gpuswap help
//! metrics`) print it; the README's glossary is the same text (a test keeps them equal).

/// The glossary, one entry per figure, in the order reports show them.
pub const GLOSSARY: &str = "\
Per tenant (gpuswap run; the --json field in brackets):
  total [total_ns]      time from the tenant's start to its end, waiting
                        included
  phase [phase_ns]      time in the app's measured phase (its main
                        computation)
  slowdown              phase time over the same program's phase time alone on
                        the device with ample VRAM (native mode; mode uvm for
                        unified memory): 1 = no loss, 2 = twice as slow; empty
                        for a tenant that failed or runs endlessly
  vram peak             most VRAM the tenant held at once
  local / remote        kernel bytes served from VRAM / read or written over
                        the host link from chunks in host memory
  evicted / returned    bytes relocated from VRAM to host memory / back
  error                 why the tenant stopped early (FAILED in compare)
Relocations (gpuswap run):
  evictions, p50, max   the tenant's allocations that had to evict, and their
                        latency
  policy, dma setup, dma
                        where that latency went, summed: the victim policy's
                        run, the copy engines' setup, the transfers
  waiting               the rest: victims draining their queued work, queueing
  suspensions           times the tenant was suspended as a victim (or for a
                        return)
  drain p50             time from a suspension request until its queued work
                        ended
  pause p50 / max       time suspended while its chunks were copied
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
which a tenant failed.
";
