//! Pushes over a world in memory: followers, inboxes (only some exist),
//! an outbox, active fans; a worker that may die between a batch and its
//! checkpoint, and replication that may fail. What a follower checks: a
//! post reaches its inbox exactly once, whatever became of the workers.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use proptest::prelude::*;

use super::push::Pusher;
use super::stores::{PushCache, PushRecords};
use super::{Change, Plan, Push, Targets};
use crate::engine::now_ms;
use crate::engine::stores::{Accounts, FeedEntries, Hints, Pulled, Replicas};
use crate::engine::testing::{run, settings, user};
use crate::error::{AppError, AppResult};
use crate::store::redis::hints::Signal;
use crate::store::redis::state::PulledChange;
use crate::store::redis::WriteMark;
use crate::types::{
    AccountStatus, CachedPost, Delivery, EntriesOf, Entry, FeedSettings, Job, JobId, PostId, User,
    UserId, Work,
};

const AUTHOR: i64 = 1;
const POST: PostId = PostId(100);
const AT: i64 = 5_000;

#[derive(Debug, Default)]
struct State {
    users: HashMap<i64, AccountStatus>,
    /// (author, follower).
    follows: BTreeSet<(i64, i64)>,
    posts: HashMap<PostId, Delivery>,
    checkpoints: Vec<i64>,
    /// The inboxes that exist: (score, id) each.
    inboxes: HashMap<i64, Vec<(i64, PostId)>>,
    /// Entries pushed, repeats included.
    writes: usize,
    outbox: BTreeSet<PostId>,
    /// Cached posts: whether each is a tombstone.
    cached: HashMap<PostId, bool>,
    pulled: Vec<PulledChange>,
    /// Active fans of the author: (fan, last seen, ms).
    fans: Vec<(i64, i64)>,
    hints: usize,
    /// The cache's writes, in order.
    log: Vec<&'static str>,
}

#[derive(Debug, Default)]
struct World {
    state: Mutex<State>,
    replication_fails: AtomicBool,
}

impl World {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// An author with `followers` (ids from 10), of whom those `idle` have
    /// no inbox; the author has one. Its post, ordinary or `pulled`.
    fn with(followers: i64, idle: &[i64], pulled: bool) -> World {
        let world = World::default();
        {
            let mut s = world.state();
            s.users.insert(AUTHOR, AccountStatus::Active);
            s.inboxes.insert(AUTHOR, Vec::new());
            for f in 10..10 + followers {
                s.users.insert(f, AccountStatus::Active);
                s.follows.insert((AUTHOR, f));
                if !idle.contains(&f) {
                    s.inboxes.insert(f, Vec::new());
                }
            }
            s.posts.insert(POST, delivery(pulled));
        }
        world
    }

    /// The inboxes holding the post, and how many times each.
    fn holding(&self) -> HashMap<i64, usize> {
        let s = self.state();
        s.inboxes
            .iter()
            .map(|(r, entries)| (*r, entries.iter().filter(|e| e.1 == POST).count()))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

fn delivery(pulled: bool) -> Delivery {
    Delivery {
        post: CachedPost {
            author_id: UserId(AUTHOR),
            author_username: "author".into(),
            body: "hello".into(),
            created_at_ms: AT,
            deleted: false,
            meta: None,
        },
        pulled,
        big_v: pulled,
        big_v_epoch: 1,
    }
}

impl Accounts for World {
    async fn user(&self, id: UserId) -> AppResult<Option<User>> {
        Ok(self
            .state()
            .users
            .get(&id.0)
            .map(|status| user(id, *status)))
    }
}

impl FeedEntries for World {
    async fn entries(&self, of: EntriesOf, limit: i64) -> AppResult<Vec<Entry>> {
        let s = self.state();
        let mut all: Vec<Entry> = s
            .posts
            .iter()
            .filter(
                |(_, d)| matches!(of, EntriesOf::Pulled(a) if a == d.post.author_id && d.pulled),
            )
            .map(|(id, d)| Entry::new(d.post.created_at_ms, *id))
            .collect();
        all.sort_by(crate::types::feed_order);
        all.truncate(limit as usize);
        Ok(all)
    }
}

impl PushRecords for World {
    async fn delivery(&self, id: PostId) -> AppResult<Option<Delivery>> {
        Ok(self.state().posts.get(&id).cloned())
    }

    async fn inboxes_after(
        &self,
        author: UserId,
        after: i64,
        limit: i64,
    ) -> AppResult<Vec<UserId>> {
        let s = self.state();
        let mut ids: Vec<UserId> = s
            .follows
            .iter()
            .filter(|(a, _)| *a == author.0)
            .map(|(_, f)| *f)
            .chain([author.0])
            .filter(|id| *id > after)
            .map(UserId)
            .collect();
        ids.sort_unstable();
        ids.truncate(limit as usize);
        Ok(ids)
    }

    async fn checkpoint_job(&self, _job: &Job, checkpoint: i64, _lease: Duration) -> AppResult<()> {
        self.state().checkpoints.push(checkpoint);
        Ok(())
    }
}

impl Replicas for World {
    fn write_mark(&self) -> WriteMark {
        WriteMark::default()
    }

    async fn replicated(&self, _mark: WriteMark) -> AppResult<()> {
        if self.replication_fails.load(Ordering::Relaxed) {
            return Err(AppError::Unavailable {
                what: "Redis",
                source: "no replica acknowledged".into(),
            });
        }
        Ok(())
    }
}

impl Hints for World {
    async fn hint(&self, _signal: Signal) {
        self.state().hints += 1;
    }
}

impl Pulled for World {
    async fn pulled_change(&self, _author: UserId, change: PulledChange) -> AppResult<()> {
        self.state().pulled.push(change);
        Ok(())
    }
}

impl PushCache for World {
    async fn publish(
        &self,
        post: &CachedPost,
        id: PostId,
        _outbox_cap: i64,
        _ttl_secs: u64,
    ) -> AppResult<bool> {
        let mut s = self.state();
        s.log.push("publish");
        s.cached.entry(id).or_insert(post.deleted);
        Ok(s.outbox.insert(id))
    }

    async fn tombstone(&self, id: PostId, _ttl_secs: u64) -> AppResult<()> {
        let mut s = self.state();
        s.log.push("tombstone");
        s.cached.insert(id, true);
        Ok(())
    }

    async fn take_back(&self, _author: UserId, post: PostId) -> AppResult<()> {
        let mut s = self.state();
        s.log.push("take back");
        s.outbox.clear();
        s.cached.remove(&post);
        Ok(())
    }

    async fn active_fans(&self, _author: UserId, since_ms: i64) -> AppResult<Vec<UserId>> {
        let s = self.state();
        let mut fans: Vec<UserId> = s
            .fans
            .iter()
            .filter(|(_, seen)| *seen >= since_ms)
            .map(|(f, _)| UserId(*f))
            .collect();
        fans.sort_unstable();
        Ok(fans)
    }

    async fn push(
        &self,
        readers: &[UserId],
        entries: &[Entry],
        _cap: i64,
        _cut: Option<i64>,
    ) -> AppResult<i64> {
        let mut s = self.state();
        s.log.push("push");
        let mut added = 0;
        for r in readers {
            s.writes += entries.len();
            let Some(inbox) = s.inboxes.get_mut(&r.0) else {
                continue;
            };
            for e in entries {
                if !inbox.contains(&(e.score, e.id)) {
                    inbox.push((e.score, e.id));
                    added += 1;
                }
            }
        }
        Ok(added)
    }

    async fn withdraw(&self, _author: UserId, readers: &[UserId], entry: Entry) -> AppResult<()> {
        let mut s = self.state();
        s.log.push("withdraw");
        s.outbox.remove(&entry.id);
        for r in readers {
            if let Some(inbox) = s.inboxes.get_mut(&r.0) {
                inbox.retain(|e| *e != (entry.score, entry.id));
            }
        }
        Ok(())
    }
}

fn pusher(world: &World, batch: i64) -> Pusher<'_, World, World> {
    Pusher {
        records: world,
        cache: world,
        settings: FeedSettings {
            active_window_secs: 60,
            ..settings()
        },
        batch,
        post_cache_ttl_secs: 60,
        lease: Duration::from_secs(30),
    }
}

fn job() -> Job {
    Job {
        id: JobId(1),
        author_id: UserId(AUTHOR),
        checkpoint: 0,
        attempts: 1,
        created_at_ms: AT,
        lease: 1,
        work: Work::Deliver { post: POST },
    }
}

/// Runs a delivery job's plan step by step: `record` says, a step at a
/// time, whether the worker lives to checkpoint its batch (a worker that
/// does not is followed by another, which resumes from the last checkpoint
/// recorded). Returns the steps taken.
async fn deliver(
    p: &Pusher<'_, World, World>,
    plan: &Plan,
    mut record: impl FnMut() -> bool,
) -> usize {
    let (change, to) = match plan {
        Plan::Push { entries, cut, to } => (Change::Add { entries, cut: *cut }, to),
        &Plan::Retract { entry, .. } => (Change::Remove(entry), &Targets::Followers),
        _ => return 0,
    };
    let mut job = job();
    let mut ahead = None;
    for steps in 1.. {
        let push = Push { change, to };
        let lives = record();
        let last = p
            .push_step(&mut job, &mut ahead, push, lives, WriteMark::default())
            .await
            .expect("a step");
        if last {
            return steps;
        }
        if !lives {
            job = Job {
                checkpoint: p.records.state().checkpoints.last().copied().unwrap_or(0),
                ..job
            };
            ahead = None;
        }
        assert!(steps < 1000, "a delivery that does not end");
    }
    unreachable!()
}

#[test]
fn a_delivery_reaches_every_inbox_once_in_batches_and_checkpoints_each() {
    let world = World::with(23, &[15], false);
    let p = pusher(&world, 5);
    run(async {
        let plan = p.plan_delivery(UserId(AUTHOR), POST).await.expect("a plan");
        assert!(matches!(
            plan,
            Plan::Push {
                to: Targets::Followers,
                ..
            }
        ));
        let steps = deliver(&p, &plan, || true).await;
        let holding = world.holding();
        let mut expected: Vec<i64> = (10..33).filter(|f| *f != 15).chain([AUTHOR]).collect();
        expected.sort_unstable();
        let mut got: Vec<i64> = holding.keys().copied().collect();
        got.sort_unstable();
        assert_eq!(got, expected, "the inboxes holding the post");
        assert!(holding.values().all(|n| *n == 1));
        assert!(
            !world.state().inboxes.contains_key(&15),
            "an idle inbox was made"
        );
        // 24 readers, 5 a batch: 5 batches, a checkpoint after each but the last.
        assert_eq!(steps, 5);
        assert_eq!(world.state().checkpoints, vec![13, 18, 23, 28]);
        assert!(world.state().outbox.contains(&POST));
        assert_eq!(world.state().hints, 1);
    });
}

#[test]
fn a_batch_pushed_but_not_checkpointed_is_pushed_again_and_nothing_is_lost() {
    let world = World::with(23, &[], false);
    let p = pusher(&world, 5);
    run(async {
        let plan = p.plan_delivery(UserId(AUTHOR), POST).await.expect("a plan");
        let mut n = 0;
        deliver(&p, &plan, || {
            n += 1;
            n != 3
        })
        .await;
        let holding = world.holding();
        assert_eq!(holding.len(), 24);
        assert!(holding.values().all(|c| *c == 1));
        assert_eq!(
            world.state().writes,
            24 + 5,
            "the lost batch was not pushed again"
        );
    });
}

#[test]
fn a_big_v_post_goes_only_to_its_active_fans_with_inboxes() {
    let world = World::with(10, &[12], true);
    world.state().fans = vec![(11, now_ms()), (12, now_ms()), (13, now_ms() - 3_600_000)];
    let p = pusher(&world, 5);
    run(async {
        let plan = p.plan_delivery(UserId(AUTHOR), POST).await.expect("a plan");
        deliver(&p, &plan, || true).await;
        let holding: Vec<i64> = world.holding().into_keys().collect();
        assert_eq!(holding, vec![11]);
        assert!(world.state().outbox.contains(&POST), "not in the outbox");
        assert!(world.state().pulled.contains(&PulledChange::Promote(1)));
    });
}

#[test]
fn a_delivery_for_an_author_being_deleted_takes_its_writes_back() {
    let world = World::with(5, &[], false);
    world.state().users.insert(AUTHOR, AccountStatus::Deleted);
    let p = pusher(&world, 5);
    run(async {
        let plan = p.plan_delivery(UserId(AUTHOR), POST).await.expect("a plan");
        assert!(matches!(plan, Plan::Nothing));
        let s = world.state();
        assert!(s.outbox.is_empty() && s.cached.is_empty());
        assert_eq!(s.pulled, vec![PulledChange::Forget]);
        assert_eq!(s.hints, 0);
        assert!(s.inboxes.values().all(Vec::is_empty));
    });
}

#[test]
fn a_deleted_post_is_delivered_nowhere_and_gets_its_tombstone() {
    let world = World::with(3, &[], false);
    world.state().posts.get_mut(&POST).unwrap().post.deleted = true;
    let p = pusher(&world, 5);
    run(async {
        let plan = p.plan_delivery(UserId(AUTHOR), POST).await.expect("a plan");
        assert!(matches!(plan, Plan::Nothing));
        let s = world.state();
        assert_eq!(s.log, ["tombstone"]);
        assert_eq!(s.cached.get(&POST), Some(&true));
        assert!(s.outbox.is_empty());
    });
}

#[test]
fn a_retraction_takes_the_entry_out_of_every_inbox_and_the_outbox() {
    let world = World::with(23, &[15], false);
    let p = pusher(&world, 5);
    run(async {
        let plan = p.plan_delivery(UserId(AUTHOR), POST).await.expect("a plan");
        deliver(&p, &plan, || true).await;
        assert_eq!(world.holding().len(), 23);
        world.state().posts.get_mut(&POST).unwrap().post.deleted = true;
        let plan = p.plan_retract(POST).await.expect("a plan");
        let mut n = 0;
        // A worker dies before one checkpoint: the batch is done again.
        deliver(&p, &plan, || {
            n += 1;
            n != 2
        })
        .await;
        assert!(world.holding().is_empty(), "{:?}", world.holding());
        assert!(world.state().outbox.is_empty());
    });
}

#[test]
fn a_retraction_racing_its_author_s_purge_leaves_no_tombstone_behind() {
    let world = World::with(3, &[], false);
    world.state().posts.get_mut(&POST).unwrap().post.deleted = true;
    world.state().users.insert(AUTHOR, AccountStatus::Deleted);
    let p = pusher(&world, 5);
    run(async {
        let Plan::Retract { post, entry } = p.plan_retract(POST).await.unwrap() else {
            panic!("no retraction");
        };
        let mut job = job();
        let last = p
            .retract_step(
                &mut job,
                &mut None,
                (post, entry),
                true,
                WriteMark::default(),
            )
            .await
            .unwrap();
        assert!(last);
        {
            let s = world.state();
            assert_eq!(s.log, ["tombstone", "take back"]);
            assert!(s.cached.is_empty(), "the tombstone is left");
        }
        // A post purged already: nothing to do.
        world.state().posts.clear();
        assert!(matches!(p.plan_retract(POST).await.unwrap(), Plan::Nothing));
    });
}

#[test]
fn no_checkpoint_is_recorded_before_a_replica_holds_its_batch() {
    let world = World::with(10, &[], false);
    world.replication_fails.store(true, Ordering::Relaxed);
    let p = pusher(&world, 5);
    run(async {
        let Plan::Push { entries, cut, to } = p.plan_delivery(UserId(AUTHOR), POST).await.unwrap()
        else {
            panic!("no push");
        };
        let mut job = job();
        let push = Push {
            change: Change::Add {
                entries: &entries,
                cut,
            },
            to: &to,
        };
        let step = p
            .push_step(&mut job, &mut None, push, true, WriteMark::default())
            .await;
        assert!(step.is_err());
        assert!(world.state().checkpoints.is_empty());
        assert_eq!(job.checkpoint, 0);
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// Whatever the audience's size, the batch size and which workers die
    /// before their checkpoint, every inbox gets the post exactly once.
    #[test]
    fn every_inbox_gets_the_post_once_whichever_workers_die(
        followers in 0..40i64,
        batch in 1..8i64,
        deaths in prop::collection::vec(any::<bool>(), 0..64),
    ) {
        let world = World::with(followers, &[], false);
        let p = pusher(&world, batch);
        run(async {
            let plan = p.plan_delivery(UserId(AUTHOR), POST).await.expect("a plan");
            let mut deaths = deaths.into_iter();
            deliver(&p, &plan, || !deaths.next().unwrap_or(false)).await;
        });
        let holding = world.holding();
        prop_assert_eq!(holding.len() as i64, followers + 1);
        prop_assert!(holding.values().all(|n| *n == 1));
    }
}
