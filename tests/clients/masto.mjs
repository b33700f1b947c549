// Drives the service through masto.js, as a JavaScript app written for
// Mastodon would: the same session as the Mastodon.py one (credentials,
// follows, a retried publish, a scroll with the paginator while posts
// arrive and a followed big-V is demoted and promoted again, a refresh,
// the streaming WebSocket across a reconnect and an instance restart, a
// new follower told on it, notifications one by one and grouped, a home
// scrolled through a hide filter, a list scrolled and made exclusive,
// delete, mute, block). Every status must appear exactly once, in order.
//
// Environment: FEED_BASE, FEED_TOKENS, FEED_IDS, FEED_ADMIN (as for
// mastodon_py.py; here the users are carol, dan and vip2, vip2 a big-V).

import { createRestAPIClient, createStreamingAPIClient } from "masto";
import WebSocket from "ws";
import { createInterface } from "node:readline";

// Node.js 20 has no WebSocket of its own (masto.js reads the global's)
// nor Promise.withResolvers (Node.js 22 has both).
globalThis.WebSocket ??= WebSocket;
Promise.withResolvers ??= function () {
  let resolve, reject;
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
};

const BASE = process.env.FEED_BASE;
const TOKENS = JSON.parse(process.env.FEED_TOKENS);
const IDS = JSON.parse(process.env.FEED_IDS);

const client = (name) => createRestAPIClient({ url: BASE, accessToken: TOKENS[name] });
const check = (cond, what) => {
  if (!cond) {
    console.error("FAILED:", what);
    process.exit(1);
  }
};
// Mastodon's order of ids: shorter is older, then lexical.
const newer = (a, b) => a.length > b.length || (a.length === b.length && a > b);
const inOrder = (statuses, what) => {
  const ids = statuses.map((s) => s.id);
  check(new Set(ids).size === ids.length, `${what}: a status twice: ${ids}`);
  for (let i = 1; i < ids.length; i++) {
    check(newer(ids[i - 1], ids[i]), `${what}: not newest first: ${ids}`);
  }
  return ids;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const wait = async (cond, what, secs = 20) => {
  const deadline = Date.now() + secs * 1000;
  while (Date.now() < deadline) {
    if (cond()) return;
    await sleep(50);
  }
  check(false, what);
};

// Sets the big-V thresholds (the service's admin API) and waits until the
// service has made `name` big-V or not.
const ADMIN = { Authorization: `Bearer ${process.env.FEED_ADMIN}` };
const thresholds = async (up, down, name, bigV) => {
  const res = await fetch(`${BASE}/api/v1/admin/settings`, {
    method: "PUT",
    headers: { ...ADMIN, "Content-Type": "application/json" },
    body: JSON.stringify({ big_v_threshold: up, big_v_demote_threshold: down }),
  });
  check(res.ok, `settings: ${res.status} ${await res.text()}`);
  const deadline = Date.now() + 20000;
  for (;;) {
    const user = await (await fetch(`${BASE}/api/v1/users/${IDS[name]}`, { headers: ADMIN })).json();
    if (user.big_v === bigV) return;
    check(Date.now() < deadline, `${name} big-V ${bigV}: ${JSON.stringify(user)}`);
    await sleep(50);
  }
};

const carol = client("carol");
const dan = client("dan");
const vip = client("vip2");

const me = await carol.v1.accounts.verifyCredentials();
check(me.username === "carol" && me.id === String(IDS.carol), `verifyCredentials: ${me.id}`);
check((await carol.v1.accounts.lookup({ acct: "dan" })).id === String(IDS.dan), "lookup dan");
// Whom to follow, found by name (search v2): the exact match first.
const found = await carol.v2.search.list({ q: "@DAN", type: "accounts", resolve: true });
check(found.accounts[0]?.id === String(IDS.dan), `search dan: ${JSON.stringify(found.accounts)}`);
check(found.statuses.length === 0 && found.hashtags.length === 0, "search: no statuses or hashtags");
const vips = await carol.v2.search.list({ q: "vip2", following: true });
check(vips.accounts.length === 0, "search: only followed accounts, none yet");
for (const name of ["dan", "vip2"]) {
  const rel = await carol.v1.accounts.$select(String(IDS[name])).follow();
  check(rel.following, `following ${name}`);
}
const rels = await carol.v1.accounts.relationships.fetch({ id: [String(IDS.dan), String(IDS.vip2)] });
check(rels.length === 2 && rels.every((r) => r.following), "relationships");
const followed = await carol.v2.search.list({ q: "vip2", following: true });
check(followed.accounts[0]?.id === String(IDS.vip2), "search: a followed account");

// A publish retried with one key answers the first status.
const keyed = { requestInit: { headers: { "Idempotency-Key": "masto-once" } } };
const first = await dan.v1.statuses.create({ status: "retried" }, keyed);
const again = await dan.v1.statuses.create({ status: "retried" }, keyed);
check(first.id === again.id, `a retry posted twice: ${first.id} ${again.id}`);
const posted = [first.id];
for (let i = 0; i < 30; i++) {
  posted.push((await (i % 3 ? dan : vip).v1.statuses.create({ status: `before ${i}` })).id);
}
// Several statuses at once (Mastodon 4.3), in the order asked.
const several = await carol.v1.statuses.fetch({ id: [posted[2], posted[0], posted[1]] });
check(several.map((s) => s.id).join() === [posted[2], posted[0], posted[1]].join(), "statuses by ids");
// The home marker: set on one device, read on another.
const marked = await carol.v1.markers.create({ home: { lastReadId: posted[1] } });
check(marked.home.lastReadId === posted[1] && marked.home.version === 0, "markers.create");
const read = await client("carol").v1.markers.fetch({ timeline: ["home", "notifications"] });
check(read.home.lastReadId === posted[1] && read.notifications === undefined, "markers.fetch");
// dan is told carol follows it.
const told = await dan.v1.notifications.list({ types: ["follow"] });
check(told[0]?.type === "follow" && told[0].account.id === String(IDS.carol), "notifications.list");
check((await dan.v1.notifications.unreadCount.fetch()).count === told.length, "unreadCount");
// The same in groups (4.3's v2): every new follower of today in one.
const grouped = await dan.v2.notifications.list();
const group = grouped.notificationGroups[0];
check(
  grouped.notificationGroups.length === 1 && group.type === "follow" && group.notificationsCount === told.length,
  `v2 notifications.list ${JSON.stringify(grouped)}`,
);
check(group.sampleAccountIds.includes(String(IDS.carol)) && grouped.accounts.some((a) => a.id === String(IDS.carol)), "the group's sample");
const whole = await dan.v2.notifications.$select(group.groupKey).fetch();
check(whole.notificationGroups[0].notificationsCount === told.length, "a group by its key");
const fans = await dan.v2.notifications.$select(group.groupKey).accounts.fetch();
check(fans.map((a) => a.id).join() === told.map((n) => n.account.id).join(), `the group's accounts ${fans.map((a) => a.id)}`);
check((await dan.v2.notifications.unreadCount.fetch()).count === 1, "unread groups");
await dan.v1.notifications.$select(told[0].id).dismiss();
check((await dan.v1.notifications.list()).every((n) => n.id !== told[0].id), "dismiss");

// Scroll to the end with the paginator while posts keep arriving, and vip2
// is demoted (pushed from then on) and promoted again (pulled) mid-scroll.
const seen = [];
const arriving = [];
let pages = 0;
for await (const page of carol.v1.timelines.home.list({ limit: 7 })) {
  if (page.length === 0) break;
  seen.push(...page);
  pages++;
  arriving.push((await (pages % 2 ? dan : vip).v1.statuses.create({ status: `during ${pages}` })).id);
  if (pages === 2) await thresholds(100, 50, "vip2", false);
  if (pages === 4) await thresholds(3, 1, "vip2", true);
}
const ids = inOrder(seen, "the scroll");
check(
  ids.length === posted.length && posted.every((id) => ids.includes(id)),
  `the scroll holds exactly what was posted before it: ${ids.length} of ${posted.length}`,
);

// A filtered home (filters v2): a hide filter leaves out what it matches,
// pages stay full and every other status comes once; warn marks instead.
const scrollAll = async (limit) => {
  const got = [];
  const sizes = [];
  for await (const page of carol.v1.timelines.home.list({ limit })) {
    if (page.length === 0) break;
    got.push(...page);
    sizes.push(page.length);
  }
  return { got, sizes };
};
const unfiltered = (await scrollAll(40)).got;
const hide = await carol.v2.filters.create({
  title: "No during",
  context: ["home"],
  filterAction: "hide",
  keywordsAttributes: [{ keyword: "during", wholeWord: true }],
});
check(hide.filterAction === "hide" && hide.keywords[0].keyword === "during", `filters.create ${JSON.stringify(hide)}`);
const { got: kept, sizes } = await scrollAll(7);
const unhidden = unfiltered.filter((s) => !/\bduring\b/.test(s.content)).map((s) => s.id);
check(unhidden.length < unfiltered.length, "the filter has something to hide");
check(inOrder(kept, "the filtered scroll").join() === unhidden.join(), `the filtered scroll: ${kept.length} of ${unhidden.length}`);
check(sizes.slice(0, -1).every((n) => n === 7), `filtered pages are full: ${sizes}`);
await carol.v2.filters.$select(hide.id).update({ filterAction: "warn" });
const warned = (await scrollAll(40)).got.filter((s) => s.filtered?.length);
check(
  warned.length === unfiltered.length - unhidden.length &&
    warned.every((s) => s.filtered[0].filter.title === "No during" && s.filtered[0].keywordMatches[0] === "during"),
  `warned ${warned.length}`,
);
check((await carol.v2.filters.list()).some((f) => f.id === hide.id), "filters.list");
await carol.v2.filters.$select(hide.id).remove();
check((await carol.v2.filters.list()).length === 0, "filters.remove");

// Refresh: min_id, paging up (rel="prev"), the closest first.
const fresh = [];
for await (const page of carol.v1.timelines.home.list({ minId: ids[0], limit: 3 }).setDirection("prev")) {
  if (page.length === 0) break;
  fresh.unshift(...page);
}
check(
  JSON.stringify(inOrder(fresh, "the refresh")) === JSON.stringify([...arriving].reverse()),
  `the refresh holds what arrived during the scroll: ${fresh.map((s) => s.id)} ${arriving}`,
);

// Lists: one of vip2 (a big-V: pulled) scrolled with the paginator holds
// each of its statuses once, in order; dan added brings his past statuses
// at once; an exclusive list keeps its members out of the home.
const homeNow = (await scrollAll(40)).got.map((s) => s.id);
const vip2Posts = (await scrollAll(40)).got.filter((s) => s.account.id === String(IDS.vip2)).map((s) => s.id);
const scrollList = async (id, limit) => {
  const got = [];
  for await (const page of carol.v1.timelines.list.$select(id).list({ limit })) {
    if (page.length === 0) break;
    got.push(...page);
  }
  return inOrder(got, "a list's scroll");
};
const friends = await carol.v1.lists.create({ title: "friends" });
check(friends.title === "friends" && friends.exclusive === false, `lists.create ${JSON.stringify(friends)}`);
await carol.v1.lists.$select(friends.id).accounts.create({ accountIds: [String(IDS.vip2)] });
check((await scrollList(friends.id, 4)).join() === vip2Posts.join(), `the list holds vip2's statuses: ${vip2Posts.length}`);
await carol.v1.lists.$select(friends.id).accounts.create({ accountIds: [String(IDS.dan)] });
check((await scrollList(friends.id, 6)).join() === homeNow.join(), "dan's past statuses join the list at once");
const members = [];
for await (const page of carol.v1.lists.$select(friends.id).accounts.list()) members.push(...page.map((a) => a.id));
check(members.sort().join() === [String(IDS.dan), String(IDS.vip2)].sort().join(), `list accounts ${members}`);
const ofDan = await carol.v1.accounts.$select(String(IDS.dan)).lists.list();
check(ofDan.map((l) => l.id).join() === friends.id, "an account's lists");
await carol.v1.lists.$select(friends.id).accounts.remove({ accountIds: [String(IDS.vip2)] });
check(
  (await scrollList(friends.id, 40)).join() === homeNow.filter((id) => !vip2Posts.includes(id)).join(),
  "vip2 left the list at once",
);
const apart = await carol.v1.lists.$select(friends.id).update({ title: "close friends", exclusive: true });
check(apart.exclusive === true && apart.title === "close friends", `lists.update ${JSON.stringify(apart)}`);
check((await scrollAll(40)).got.map((s) => s.id).join() === vip2Posts.join(), "dan's statuses left the home");
await carol.v1.lists.$select(friends.id).remove();
check((await scrollAll(40)).got.map((s) => s.id).join() === homeNow.join(), "dan's statuses came back home");
const left = [];
for await (const page of carol.v1.lists.list()) left.push(...page);
check(left.length === 0, "lists.list");

// The streaming WebSocket, across a reconnect; the gap filled with min_id.
const streamUrl = (await carol.v2.instance.fetch()).configuration.urls.streaming;
const listen = (retry = false) => {
  const streaming = createStreamingAPIClient({
    streamingApiUrl: streamUrl,
    accessToken: TOKENS.carol,
    implementation: WebSocket,
    retry,
    log: process.env.MASTO_LOG ?? "warn",
  });
  const got = { updates: [], deletes: [], notifications: [], filtersChanged: 0 };
  (async () => {
    try {
      for await (const event of streaming.user.subscribe()) {
        if (event.event === "update") got.updates.push(event.payload);
        if (event.event === "delete") got.deletes.push(event.payload);
        if (event.event === "notification") got.notifications.push(event.payload);
        if (event.event === "filters_changed") got.filtersChanged += 1;
      }
    } catch (e) {
      got.error = e;
    }
  })();
  return { streaming, got };
};
// Nothing tells a client when its subscription is in effect (as on
// Mastodon): it posts probes until one arrives; what is older comes from
// the timeline.
const ready = async (got) => {
  const probes = [];
  for (let i = 0; i < 100; i++) {
    const probe = (await dan.v1.statuses.create({ status: `probe ${i}` })).id;
    probes.push(probe);
    const deadline = Date.now() + 500;
    while (Date.now() < deadline) {
      const at = got.updates.findIndex((s) => s.id === probe);
      if (at >= 0) return { probes, from: at + 1 };
      await sleep(20);
    }
  }
  check(false, "the stream never delivered a probe");
};
let { streaming, got } = listen();
const first1 = await ready(got);
const live = [
  (await dan.v1.statuses.create({ status: "live 1" })).id,
  (await vip.v1.statuses.create({ status: "live 2" })).id,
];
await wait(() => got.updates.length >= first1.from + 2, `two updates: ${got.updates.map((s) => s.id)} ${got.error}`);
// A new follower is told on the same stream, as the library's entity.
await vip.v1.accounts.$select(String(IDS.carol)).follow();
await wait(() => got.notifications.length >= 1, `a notification event: ${got.error}`);
const heard = got.notifications[0];
check(heard.type === "follow" && heard.account.id === String(IDS.vip2) && heard.groupKey.startsWith("follow-"), `the notification event ${JSON.stringify(heard)}`);
await vip.v1.accounts.$select(String(IDS.carol)).unfollow();
// A filter changed elsewhere: the stream says so.
const streamed = await carol.v2.filters.create({ title: "Streamed", context: ["home"], keywordsAttributes: [{ keyword: "never-said" }] });
await wait(() => got.filtersChanged >= 1, `a filters_changed event: ${got.error}`);
await carol.v2.filters.$select(streamed.id).remove();
streaming.close();
const lastSeen = got.updates[got.updates.length - 1].id;
const away = [
  (await dan.v1.statuses.create({ status: "away 1" })).id,
  (await vip.v1.statuses.create({ status: "away 2" })).id,
];
const before = got.updates.slice(first1.from);
({ streaming, got } = listen());
const second = await ready(got);
const back = [(await vip.v1.statuses.create({ status: "back 1" })).id];
await wait(() => got.updates.length >= second.from + 1, "an update after reconnecting");
// The gap: what came between the last status of the first stream and the
// first of the second.
const gap = await carol.v1.timelines.home.list({ minId: lastSeen, maxId: got.updates[0].id, limit: 40 });
const stitched = [
  ...before.map((s) => s.id),
  ...[...gap].reverse().map((s) => s.id),
  ...got.updates.map((s) => s.id),
];
const want = [...live, ...away, ...second.probes, ...back];
check(
  JSON.stringify(stitched) === JSON.stringify(want),
  `stream, gap and stream again: ${stitched} want ${want}`,
);

// Delete: the stream says so; the home no longer shows it.
const gone = await dan.v1.statuses.$select(live[0]).remove();
check(gone.id === live[0], `delete answers the status: ${gone.id}`);
await wait(() => got.deletes.includes(live[0]), `a delete event: ${got.deletes}`);
streaming.close();

// A list's stream (`list`) on the WebSocket: only its members' statuses.
const liveList = await carol.v1.lists.create({ title: "live" });
await carol.v1.lists.$select(liveList.id).accounts.create({ accountIds: [String(IDS.dan)] });
const listStreaming = createStreamingAPIClient({
  streamingApiUrl: streamUrl,
  accessToken: TOKENS.carol,
  implementation: WebSocket,
  log: process.env.MASTO_LOG ?? "warn",
});
const listed = { updates: [] };
(async () => {
  try {
    for await (const event of listStreaming.list.subscribe({ list: liveList.id })) {
      if (event.event === "update") listed.updates.push(event.payload);
    }
  } catch (e) {
    listed.error = e;
  }
})();
const listReady = await ready(listed);
await vip.v1.statuses.create({ status: "not in the list" });
const inList = (await dan.v1.statuses.create({ status: "in the list" })).id;
await wait(() => listed.updates.length > listReady.from, `an update of the list: ${listed.error}`);
check(
  listed.updates.slice(listReady.from).map((s) => s.id).join() === inList,
  `the list's stream: ${listed.updates.map((s) => s.content)}`,
);
listStreaming.close();
await carol.v1.lists.$select(liveList.id).remove();
const home = async () => (await carol.v1.timelines.home.list({ limit: 40 })).map((s) => s.account.id);
check(!(await carol.v1.timelines.home.list({ limit: 40 })).some((s) => s.id === live[0]), "the deleted status left the home");

// An instance restart mid-stream: masto.js reconnects by itself (retry)
// and subscribes again; what was posted meanwhile is filled in with
// min_id and max_id. (The harness restarts the service when this prints
// `restart`, and answers `restarted` on standard input.)
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
({ streaming, got } = listen(true));
const third = await ready(got);
const pre = [(await dan.v1.statuses.create({ status: "before the restart" })).id];
await wait(() => got.updates.length >= third.from + 1, `an update before the restart: ${got.error}`);
const cut = got.updates.length;
console.log("restart");
check((await lines.next()).value === "restarted", "the service restarted");
const during = [(await dan.v1.statuses.create({ status: "while the stream reconnects" })).id];
const after = await ready(got);
streaming.close();
const resumed = got.updates.slice(cut);
const refill = await carol.v1.timelines.home.list({ minId: got.updates[cut - 1].id, maxId: resumed[0].id, limit: 40 });
const restitched = [
  ...got.updates.slice(third.from, cut).map((s) => s.id),
  ...[...refill].reverse().map((s) => s.id),
  ...resumed.map((s) => s.id),
];
const rewant = [...pre, ...during, ...after.probes];
check(
  JSON.stringify(restitched) === JSON.stringify(rewant),
  `stream, restart, gap and stream: ${restitched} want ${rewant}`,
);

// Mute and block.
check((await carol.v1.accounts.$select(String(IDS.dan)).mute()).muting, "muting");
check(!(await home()).includes(String(IDS.dan)), "no status of a muted account");
check(!(await carol.v1.accounts.$select(String(IDS.dan)).unmute()).muting, "unmuted");
check((await home()).includes(String(IDS.dan)), "unmuted statuses are back");
const blocked = await carol.v1.accounts.$select(String(IDS.vip2)).block();
check(blocked.blocking && !blocked.following, "blocking");
check(!(await home()).includes(String(IDS.vip2)), "no status of a blocked account");
console.log(
  `ok: ${ids.length} statuses scrolled in ${pages} pages, ${fresh.length} refreshed, ` +
    `${refill.length} filled in after the restart`,
);
process.exit(0);
