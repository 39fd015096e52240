//! Who may take a contract. A process names the contract it wants (`GPUSWAP_TENANT_NAME`,
//! else its program's name), but names are the tenant's word: a contract is given only
//! to a process the kernel vouches for, by its uid (`SO_PEERCRED` on its connection) and
//! its cgroup (`/proc/PID/cgroup`: a Slurm job's or a Kubernetes pod's). The decision is
//! pure and lives here; the serve loop reads the credentials and the cgroups.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gpuswap_core::Contract;

/// A `[process.NAME]` table: its contract, and who may take it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessContract {
    /// The name a process claims it by.
    pub name: String,
    /// Its terms.
    pub contract: Contract,
    /// The uids whose processes may take it (`uids = [...]`); empty: any, when a
    /// cgroup is given, else the daemon's own only.
    pub uids: Vec<u32>,
    /// The cgroup a process must be in, or below (`cgroup = "PREFIX"`).
    pub cgroup: Option<String>,
    /// The file it comes from, for the log.
    pub source: PathBuf,
}

/// A connection's peer as the kernel reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    /// Its uid (`SO_PEERCRED`).
    pub uid: u32,
    /// Its cgroup paths: the unified hierarchy's and each v1 hierarchy's, as
    /// `/proc/PID/cgroup` lists them (empty when it could not be read).
    pub cgroups: Vec<String>,
}

impl ProcessContract {
    /// Whether `peer` may take this contract from a daemon of uid `daemon_uid`, or
    /// why not.
    pub fn admits(&self, peer: &Peer, daemon_uid: u32) -> Result<(), String> {
        if self.uids.is_empty() && self.cgroup.is_none() && peer.uid != daemon_uid {
            return Err(format!(
                "it names no uids or cgroup, so only the daemon's own uid {daemon_uid} may \
                 take it, not uid {}",
                peer.uid
            ));
        }
        if !self.uids.is_empty() && !self.uids.contains(&peer.uid) {
            return Err(format!(
                "uid {} is not among its uids {:?}",
                peer.uid, self.uids
            ));
        }
        if let Some(prefix) = &self.cgroup
            && !peer.cgroups.iter().any(|c| under(c, prefix))
        {
            let seen = match peer.cgroups.first() {
                Some(path) => format!("cgroup {path}"),
                None => "an unknown cgroup".to_owned(),
            };
            return Err(format!("the process is in {seen}, not under {prefix}"));
        }
        Ok(())
    }

    /// Who may take it, in words (`gpuswap daemon --check-contracts` prints it).
    pub fn who(&self, daemon_uid: u32) -> String {
        let uids = || {
            let list: Vec<String> = self.uids.iter().map(u32::to_string).collect();
            format!("uid {}", list.join(" or "))
        };
        match (&self.cgroup, self.uids.is_empty()) {
            (None, true) => format!("processes of the daemon's own uid ({daemon_uid})"),
            (None, false) => format!("processes of {}", uids()),
            (Some(prefix), true) => format!("processes of any uid in cgroup {prefix}"),
            (Some(prefix), false) => format!("processes of {} in cgroup {prefix}", uids()),
        }
    }
}

/// Whether cgroup `path` is `prefix` or below it, by whole components:
/// `/slurm/job_42` is under `/slurm/job_42` and `/slurm`, not under `/slurm/job_4`.
pub fn under(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    prefix.is_empty()
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The cgroup paths of a `/proc/PID/cgroup` text, the unified hierarchy's (`0::PATH`)
/// first, each once.
pub fn parse_cgroups(text: &str) -> Vec<String> {
    // (hierarchy id, path) of each well-formed line.
    let lines: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let id = fields.next()?;
            let path = fields.nth(1)?;
            Some((id, path))
        })
        .collect();
    let unified = lines.iter().filter(|(id, _)| *id == "0");
    let v1 = lines.iter().filter(|(id, _)| *id != "0");
    let mut paths: Vec<String> = Vec::new();
    for (_, path) in unified.chain(v1) {
        if !paths.iter().any(|p| p == path) {
            paths.push((*path).to_owned());
        }
    }
    paths
}

/// The cgroups of process `pid`; empty when they cannot be read (it exited already).
pub fn cgroups_of(pid: u32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map(|text| parse_cgroups(&text))
        .unwrap_or_default()
}

/// Reads one contracts file into its tables: the command line's parser, which knows
/// the keys, the mode and `--vram`, lent to the daemon to read its folder again.
pub type LoadContracts = dyn Fn(&Path) -> Result<Vec<ProcessContract>, String> + Send + Sync;

/// `--contracts-dir`: a folder of contracts files, one per job, read again at SIGHUP
/// and when a file changes.
#[derive(Clone)]
pub struct ContractsDir {
    /// The folder.
    pub path: PathBuf,
    /// How one of its files is read.
    pub load: Arc<LoadContracts>,
}

impl fmt::Debug for ContractsDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContractsDir")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The contracts a daemon gives: its `--contracts` file's tables, then those of its
/// `--contracts-dir` as last read.
#[derive(Clone, Debug, Default)]
pub struct Contracts {
    /// The `--contracts` file's tables.
    pub fixed: Vec<ProcessContract>,
    /// The folder, if any.
    pub dir: Option<ContractsDir>,
    /// The folder's tables as last read, its files in name order.
    from_dir: Vec<ProcessContract>,
}

/// What a process's claimed name gets it.
#[derive(Clone, Debug, PartialEq)]
pub enum Claim {
    /// The daemon has no contracts: the default.
    NoContracts,
    /// No table of that name: the default.
    Unknown,
    /// A table of that name the process may take.
    Taken(Contract, PathBuf),
    /// Tables of that name, none of which the process may take (why, for each): the
    /// default.
    Refused(String),
}

impl Claim {
    /// The contract the process runs under.
    pub fn contract(&self) -> Contract {
        match self {
            Claim::Taken(contract, _) => *contract,
            _ => Contract::default(),
        }
    }

    /// What the connection's log line says of it.
    pub fn words(&self) -> String {
        match self {
            Claim::NoContracts => "no contracts".to_owned(),
            Claim::Unknown => "no contract of that name: the default".to_owned(),
            Claim::Taken(_, source) => {
                format!("its contract [process.NAME] matched ({})", source.display())
            }
            Claim::Refused(why) => {
                format!("the contract of that name is not its to take: {why}; the default")
            }
        }
    }
}

impl Contracts {
    /// The `--contracts` file's tables, and the folder whose tables the serve loop
    /// reads (none yet).
    pub fn new(fixed: Vec<ProcessContract>, dir: Option<ContractsDir>) -> Self {
        Self {
            fixed,
            dir,
            from_dir: Vec::new(),
        }
    }

    /// Every table, the `--contracts` file's first.
    pub fn tables(&self) -> impl Iterator<Item = &ProcessContract> {
        self.fixed.iter().chain(&self.from_dir)
    }

    /// Replaces the folder's tables with those just read.
    pub fn set_dir_tables(&mut self, tables: Vec<ProcessContract>) {
        self.from_dir = tables;
    }

    /// What `name`, claimed by `peer`, gets from a daemon of uid `daemon_uid`: the
    /// first table of that name the peer may take.
    pub fn claim(&self, name: &str, peer: &Peer, daemon_uid: u32) -> Claim {
        if self.tables().next().is_none() {
            return Claim::NoContracts;
        }
        let mut refusals = Vec::new();
        for table in self.tables().filter(|t| t.name == name) {
            match table.admits(peer, daemon_uid) {
                Ok(()) => return Claim::Taken(table.contract, table.source.clone()),
                Err(why) => refusals.push(format!("{} ({})", why, table.source.display())),
            }
        }
        if refusals.is_empty() {
            Claim::Unknown
        } else {
            Claim::Refused(refusals.join("; "))
        }
    }
}

/// Contracts by name alone, as a `--contracts` file without `uids` or `cgroup` gives
/// them (tests build daemons so).
impl FromIterator<(String, Contract)> for Contracts {
    fn from_iter<I: IntoIterator<Item = (String, Contract)>>(iter: I) -> Self {
        let fixed = iter
            .into_iter()
            .map(|(name, contract)| ProcessContract {
                name,
                contract,
                uids: Vec::new(),
                cgroup: None,
                source: PathBuf::from("--contracts"),
            })
            .collect();
        Contracts::new(fixed, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAEMON: u32 = 1000;

    fn table(name: &str, uids: &[u32], cgroup: Option<&str>) -> ProcessContract {
        ProcessContract {
            name: name.into(),
            contract: Contract {
                vram_guarantee_bytes: 1 << 30,
                ..Contract::default()
            },
            uids: uids.to_vec(),
            cgroup: cgroup.map(str::to_owned),
            source: PathBuf::from(format!("{name}.toml")),
        }
    }

    fn peer(uid: u32, cgroup: &str) -> Peer {
        Peer {
            uid,
            cgroups: vec![cgroup.to_owned()],
        }
    }

    fn contracts(tables: Vec<ProcessContract>) -> Contracts {
        Contracts {
            fixed: tables,
            ..Contracts::default()
        }
    }

    #[test]
    fn a_table_without_uids_or_cgroup_is_the_daemons_own_users() {
        let c = contracts(vec![table("server", &[], None)]);
        assert!(matches!(
            c.claim("server", &peer(DAEMON, "/user.slice"), DAEMON),
            Claim::Taken(..)
        ));
        let Claim::Refused(why) = c.claim("server", &peer(1001, "/user.slice"), DAEMON) else {
            panic!("another user took it")
        };
        assert!(why.contains("only the daemon's own uid 1000"), "{why}");
        assert!(why.contains("(server.toml)"), "{why}");
        assert_eq!(c.claim("batch", &peer(DAEMON, "/"), DAEMON), Claim::Unknown);
        assert_eq!(
            Contracts::default().claim("server", &peer(DAEMON, "/"), DAEMON),
            Claim::NoContracts
        );
    }

    #[test]
    fn uids_and_cgroups_restrict_who_may_take_a_table() {
        let by_uid = contracts(vec![table("job", &[1001, 1002], None)]);
        assert!(matches!(
            by_uid.claim("job", &peer(1002, "/"), DAEMON),
            Claim::Taken(..)
        ));
        // Not even the daemon's own user takes a table bound to others.
        let Claim::Refused(why) = by_uid.claim("job", &peer(DAEMON, "/"), DAEMON) else {
            panic!()
        };
        assert!(
            why.contains("uid 1000 is not among its uids [1001, 1002]"),
            "{why}"
        );

        let job = "/system.slice/slurmstepd.scope/job_42";
        let by_cgroup = contracts(vec![table("job", &[1001], Some(job))]);
        let inside = peer(1001, &format!("{job}/step_0/user/task_0"));
        assert!(matches!(
            by_cgroup.claim("job", &inside, DAEMON),
            Claim::Taken(..)
        ));
        for outside in [
            peer(1001, "/system.slice/slurmstepd.scope/job_420/step_0"),
            peer(1001, "/user.slice/user-1001.slice/session-3.scope"),
            Peer {
                uid: 1001,
                cgroups: Vec::new(),
            },
        ] {
            let Claim::Refused(why) = by_cgroup.claim("job", &outside, DAEMON) else {
                panic!("{outside:?} took it")
            };
            assert!(why.contains(&format!("not under {job}")), "{why}");
        }
        // The right cgroup under the wrong uid is refused too.
        assert!(matches!(
            by_cgroup.claim("job", &peer(1002, &format!("{job}/step_0")), DAEMON),
            Claim::Refused(_)
        ));
        // A cgroup alone admits any uid inside it.
        let any_uid = contracts(vec![table("pod", &[], Some("/kubepods/pod1"))]);
        assert!(matches!(
            any_uid.claim("pod", &peer(0, "/kubepods/pod1/ctr"), DAEMON),
            Claim::Taken(..)
        ));
    }

    #[test]
    fn the_first_table_of_a_name_its_claimer_may_take_wins() {
        let mut second = table("shared", &[1002], None);
        second.contract.vram_guarantee_bytes = 2 << 30;
        let c = contracts(vec![table("shared", &[1001], None), second]);
        assert_eq!(
            c.claim("shared", &peer(1002, "/"), DAEMON)
                .contract()
                .vram_guarantee_bytes,
            2 << 30
        );
        let Claim::Refused(why) = c.claim("shared", &peer(1003, "/"), DAEMON) else {
            panic!()
        };
        assert!(why.contains("[1001]") && why.contains("[1002]"), "{why}");
    }

    #[test]
    fn cgroup_prefixes_match_whole_components() {
        assert!(under("/slurm/uid_1/job_42", "/slurm/uid_1/job_42"));
        assert!(under("/slurm/uid_1/job_42/step_0", "/slurm/uid_1/job_42/"));
        assert!(under("/slurm/uid_1/job_42/step_0", "/slurm"));
        assert!(!under("/slurm/uid_1/job_420", "/slurm/uid_1/job_42"));
        assert!(under("/anything", "/"));
    }

    #[test]
    fn proc_cgroup_gives_the_unified_path_first() {
        let v2 = "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n";
        assert_eq!(
            parse_cgroups(v2),
            ["/system.slice/slurmstepd.scope/job_7/step_0/user/task_0"]
        );
        let v1 = "12:memory:/slurm/uid_1/job_7/step_0\n11:devices:/slurm/uid_1/job_7/step_0\n\
                  1:name=systemd:/user.slice\n0::/user.slice\n";
        assert_eq!(
            parse_cgroups(v1),
            ["/user.slice", "/slurm/uid_1/job_7/step_0"]
        );
        assert!(parse_cgroups("garbage").is_empty());
        assert!(!cgroups_of(std::process::id()).is_empty());
    }

    #[test]
    fn who_may_take_a_table_in_words() {
        assert_eq!(
            table("a", &[], None).who(DAEMON),
            "processes of the daemon's own uid (1000)"
        );
        assert_eq!(
            table("a", &[7, 8], Some("/k")).who(DAEMON),
            "processes of uid 7 or 8 in cgroup /k"
        );
        assert_eq!(
            table("a", &[], Some("/k")).who(DAEMON),
            "processes of any uid in cgroup /k"
        );
    }
}
