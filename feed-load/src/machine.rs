//! The machine a run measured: its processor, cores, memory and system,
//! and the versions of the Redis and PostgreSQL it ran against (from the
//! servers themselves). A figure means little without them.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    /// Cores this process may run on.
    pub cores: usize,
    pub memory_gib: f64,
    pub system: String,
    pub kernel: String,
    /// `redis_version` of `INFO server`.
    pub redis: String,
    /// PostgreSQL's `server_version`.
    pub postgres: String,
    /// This tool's version (the service's is the workspace's too).
    pub tool: String,
}

impl Machine {
    pub fn describe(redis: String, postgres: String) -> Self {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let field = |text: &str, key: &str| {
            text.lines()
                .find_map(|l| {
                    let (k, v) = l.split_once([':', '='])?;
                    (k.trim() == key).then(|| v.trim().trim_matches('"').to_string())
                })
                .unwrap_or_else(|| "unknown".into())
        };
        let memory_kib: f64 = field(&read("/proc/meminfo"), "MemTotal")
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap_or(0.0);
        Machine {
            cpu: field(&read("/proc/cpuinfo"), "model name"),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib: (memory_kib / (1024.0 * 1024.0) * 10.0).round() / 10.0,
            system: field(&read("/etc/os-release"), "PRETTY_NAME"),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            redis,
            postgres,
            tool: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// `(property, value)` pairs, in the order a reader looks for them.
    pub fn properties(&self) -> Vec<(&'static str, String)> {
        vec![
            ("cpu", self.cpu.clone()),
            ("cores", self.cores.to_string()),
            ("memory", format!("{} GiB", self.memory_gib)),
            ("system", self.system.clone()),
            ("kernel", self.kernel.clone()),
            ("redis", self.redis.clone()),
            ("postgres", self.postgres.clone()),
            ("feed-load", self.tool.clone()),
        ]
    }
}

/// `major.minor` of PostgreSQL's `server_version_num` (`150008` → `15.8`).
pub fn postgres_version(num: i64) -> String {
    format!("{}.{}", num / 10_000, num % 10_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_names_its_processor_and_memory() {
        let m = Machine::describe("7.0.15".into(), postgres_version(150_008));
        assert_eq!(m.postgres, "15.8");
        assert!(m.cores >= 1);
        assert!(m.memory_gib > 0.0, "{m:?}");
        assert_ne!(m.cpu, "unknown", "{m:?}");
    }
}
