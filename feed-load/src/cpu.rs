//! CPU time of the processes a scenario loads, from `/proc`: the service,
//! PostgreSQL (every `postgres` process: its backends do the queries),
//! Redis (every `redis-server`) and this tool.

use serde::Serialize;

/// Clock ticks per second of `/proc/<pid>/stat` (`USER_HZ`: 100 on Linux).
const TICKS_PER_SEC: f64 = 100.0;

/// CPU seconds used so far, per process group.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Cpu {
    pub service: f64,
    pub postgres: f64,
    pub redis: f64,
    pub tool: f64,
}

/// `(comm, utime + stime in seconds)` of one process.
fn stat(pid: &str) -> Option<(String, f64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text[open + 1..close].to_string();
    // After the comm: state is field 3; utime and stime are fields 14, 15.
    let fields: Vec<&str> = text[close + 2..].split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((comm, (utime + stime) / TICKS_PER_SEC))
}

impl Cpu {
    /// A reading now; `service` is the service's process id.
    pub fn now(service: u32) -> Cpu {
        let mut cpu = Cpu::default();
        let me = std::process::id().to_string();
        let service = service.to_string();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return cpu;
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str() else { continue };
            if !pid.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let Some((comm, secs)) = stat(pid) else {
                continue;
            };
            if pid == service {
                cpu.service += secs;
            } else if pid == me {
                cpu.tool += secs;
            } else if comm == "postgres" {
                cpu.postgres += secs;
            } else if comm.starts_with("redis-server") {
                cpu.redis += secs;
            }
        }
        cpu
    }

    /// Milliseconds of CPU per unit of work between `self` and `later`.
    pub fn per(self, later: Cpu, units: f64) -> Cpu {
        let ms = |a: f64, b: f64| (b - a).max(0.0) * 1000.0 / units.max(1.0);
        Cpu {
            service: ms(self.service, later.service),
            postgres: ms(self.postgres, later.postgres),
            redis: ms(self.redis, later.redis),
            tool: ms(self.tool, later.tool),
        }
    }
}
