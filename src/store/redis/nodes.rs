//! The nodes of a Redis Cluster as this process last saw them: which
//! master serves which hash slot (from `CLUSTER NODES`), and the slot of a
//! key. The map only decides which calls travel together and where a read
//! goes first; a stale one costs a retry, never a wrong answer.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How long a `CLUSTER NODES` reply is used before it is read again. It
/// only decides which commands travel together and which masters a `WAIT`
/// goes to; a stale one costs a retry, never a wrong answer.
const NODES_FRESH_FOR: Duration = Duration::from_secs(1);

/// The process's last `CLUSTER NODES` reply, as a [`NodeMap`], and the
/// calls sent again because a node refused them.
#[derive(Default)]
pub struct NodeCache {
    map: Mutex<Option<Arc<NodeMap>>>,
    pub(super) resent: AtomicU64,
}

impl NodeCache {
    fn map(&self) -> MutexGuard<'_, Option<Arc<NodeMap>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `map` as the last view of the nodes.
    pub(super) fn keep(&self, map: Arc<NodeMap>) {
        *self.map() = Some(map);
    }

    pub(super) fn fresh(&self) -> Option<Arc<NodeMap>> {
        self.map()
            .as_ref()
            .filter(|m| m.read_at.elapsed() < NODES_FRESH_FOR)
            .cloned()
    }

    pub(super) fn forget(&self) {
        self.map().take();
    }

    /// Makes the cached map wrong until a call finds it out: every slot
    /// served by one master, as after a resharding this process has not
    /// seen (tests).
    pub(super) fn misroute(&self) {
        let mut cached = self.map();
        if let Some(map) = cached.as_ref() {
            *cached = Some(Arc::new(NodeMap {
                read_at: Instant::now(),
                text: map.text.clone(),
                owner: vec![0; 16384],
                masters: map.masters.clone(),
            }));
        }
    }
}

/// The nodes of a cluster, as one `CLUSTER NODES` reply gave them.
pub struct NodeMap {
    read_at: Instant,
    pub(super) text: String,
    /// For each slot, the index of the master serving it (`u16::MAX`: none).
    owner: Vec<u16>,
    /// The address of each master, by index.
    masters: Vec<(String, u16)>,
}

impl NodeMap {
    pub(super) fn parse(text: String) -> NodeMap {
        let mut owner = vec![u16::MAX; 16384];
        let mut masters = Vec::new();
        for (i, node) in cluster_nodes(&text)
            .into_iter()
            .filter(|n| n.master)
            .enumerate()
        {
            for &(from, to) in &node.slots {
                for slot in from..=to.min(16383) {
                    owner[slot as usize] = i as u16;
                }
            }
            masters.push(node.addr);
        }
        NodeMap {
            read_at: Instant::now(),
            text,
            owner,
            masters,
        }
    }

    /// The masters that are up, in the order of the reply.
    pub(super) fn masters(&self) -> &[(String, u16)] {
        &self.masters
    }

    /// The address of the master serving `slot`, if one does.
    pub(super) fn master_of(&self, slot: u16) -> Option<&(String, u16)> {
        let i = *self.owner.get(slot as usize)?;
        self.masters.get(usize::from(i))
    }

    /// Which commands may travel together: those whose slots one master
    /// serves (a slot no master serves travels alone).
    pub(super) fn node_of(&self, slot: u16) -> u32 {
        match self.owner.get(slot as usize) {
            Some(&i) if i != u16::MAX => u32::from(i),
            _ => 0x10000 + u32::from(slot),
        }
    }
}

/// One node of a `CLUSTER NODES` reply
/// (`<id> <ip:port@cport[,hostname]> <flags> <master id or -> ...`).
struct Node<'a> {
    id: &'a str,
    addr: (String, u16),
    master: bool,
    replica_of: Option<&'a str>,
    /// The slot ranges it serves (`[…]` entries, slots in migration, left out).
    slots: Vec<(u16, u16)>,
}

fn cluster_nodes(nodes: &str) -> Vec<Node<'_>> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (id, addr, flags, of) = (
                fields.next()?,
                fields.next()?,
                fields.next()?,
                fields.next()?,
            );
            let flags: Vec<&str> = flags.split(',').collect();
            if flags
                .iter()
                .any(|f| f.starts_with("fail") || *f == "handshake")
            {
                return None;
            }
            let addr = addr.split(['@', ',']).next()?;
            let (host, port) = addr.rsplit_once(':')?;
            // Then ping-sent, pong-recv, config-epoch, link-state, slots.
            let slots = fields
                .skip(4)
                .filter_map(|range| {
                    let (from, to) = range.split_once('-').unwrap_or((range, range));
                    Some((from.parse().ok()?, to.parse().ok()?))
                })
                .collect();
            Some(Node {
                id,
                addr: (host.to_string(), port.parse().ok()?),
                master: flags.contains(&"master"),
                replica_of: (flags.contains(&"slave") && of != "-").then_some(of),
                slots,
            })
        })
        .collect()
}

/// The masters that are up with a replica up, from a `CLUSTER NODES` reply.
pub(super) fn replicated_masters(nodes: &str) -> Vec<(String, u16)> {
    let all = cluster_nodes(nodes);
    all.iter()
        .filter(|m| m.master && all.iter().any(|r| r.replica_of == Some(m.id)))
        .map(|m| m.addr.clone())
        .collect()
}

/// The Redis Cluster hash slot of a key: CRC16 (XMODEM) of its hash tag
/// (the part between the first `{` and the next `}`, if not empty) or of
/// the whole key, modulo 16384.
pub fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16(tagged) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_the_hash_tag_as_redis_computes_them() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot(b"123456789"), 0x31C3);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"feed:feed:{r0}42"), slot(b"feed:following:{r0}7"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }

    #[test]
    fn the_masters_up_are_read_from_cluster_nodes() {
        let nodes = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7002@17002 master - 0 1 2 connected 5461-10922
c3 127.0.0.1:7003@17003 master,fail - 0 1 3 connected
d4 127.0.0.1:7004@17004,node4 slave a1 0 1 1 connected
e5 127.0.0.1:7005@17005 master - 0 1 5 connected 10923-16383
";
        let map = NodeMap::parse(nodes.to_string());
        let at = |port: u16| ("127.0.0.1".to_string(), port);
        assert_eq!(map.masters(), [at(7001), at(7002), at(7005)]);
        assert_eq!(replicated_masters(nodes), [at(7001)]);
        assert_eq!(map.master_of(5460), Some(&at(7001)));
        assert_eq!(map.master_of(5461), Some(&at(7002)));
        assert_eq!(map.master_of(16383), Some(&at(7005)));
        assert_eq!(NodeMap::parse(String::new()).master_of(0), None);
        assert_eq!(map.node_of(0), 0);
        assert_eq!(map.node_of(5460), 0);
        assert_eq!(map.node_of(5461), 1);
        assert_eq!(map.node_of(16383), 2);
    }

    #[test]
    fn slots_in_migration_and_single_slots_are_read_right() {
        let nodes = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-99 100 [101->-b2]
b2 127.0.0.1:7002@17002 master - 0 1 2 connected 101-16383 [101-<-a1]
";
        let map = NodeMap::parse(nodes.to_string());
        assert_eq!(map.node_of(100), 0);
        assert_eq!(map.node_of(101), 1);
        let empty = NodeMap::parse(String::new());
        assert_eq!(empty.node_of(7), 0x10000 + 7);
        assert_ne!(empty.node_of(7), empty.node_of(8));
    }
}
