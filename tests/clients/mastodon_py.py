"""Drives the service through Mastodon.py, as an app written for Mastodon
would: verify credentials, follow, post (with a retried Idempotency-Key),
scroll the home timeline to its end with fetch_next while posts keep
arriving and a followed big-V is demoted and promoted again, refresh with
min_id, stream the home across a reconnect and an instance restart (the
harness restarts the service when this prints `restart`, and answers
`restarted` on standard input), scroll it through a hide filter (filters
v2), scroll a list (its members' past statuses there at once; an exclusive
list keeping them out of the home), mute, block and delete. Every status must appear exactly once, in
order.

Environment: FEED_BASE (the service's URL), FEED_TOKENS (JSON: username ->
bearer token of alice, bob, vip), FEED_IDS (JSON: username -> account id),
FEED_ADMIN (an admin token, for the service's own settings API). vip is a
big-V: its posts reach alice's home by the pull path.
"""

import json
import os
import sys
import threading
import time

import requests
from mastodon import Mastodon, StreamListener

BASE = os.environ["FEED_BASE"]
TOKENS = json.loads(os.environ["FEED_TOKENS"])
IDS = json.loads(os.environ["FEED_IDS"])
ADMIN = {"Authorization": f"Bearer {os.environ['FEED_ADMIN']}"}


def client(name):
    return Mastodon(access_token=TOKENS[name], api_base_url=BASE, request_timeout=30)


def check(cond, what):
    if not cond:
        print("FAILED:", what, file=sys.stderr)
        sys.exit(1)


def key(status_id):
    """Mastodon's order of ids: shorter is older, then lexical."""
    s = str(status_id)
    return (len(s), s)


def in_order(statuses, what):
    ids = [str(s.id) for s in statuses]
    check(len(ids) == len(set(ids)), f"{what}: a status twice: {ids}")
    check(
        [key(i) for i in ids] == sorted((key(i) for i in ids), reverse=True),
        f"{what}: not newest first: {ids}",
    )
    return ids


def wait(cond, what, secs=20):
    deadline = time.time() + secs
    while time.time() < deadline:
        if cond():
            return
        time.sleep(0.05)
    check(False, what)


def thresholds(up, down, name, big_v):
    """Sets the big-V thresholds (the service's admin API) and waits until
    the service has made `name` big-V or not."""
    url = f"{BASE}/api/v1/admin/settings"
    body = {"big_v_threshold": up, "big_v_demote_threshold": down}
    res = requests.put(url, json=body, headers=ADMIN, timeout=30)
    check(res.ok, f"settings: {res.status_code} {res.text}")
    user = f"{BASE}/api/v1/users/{IDS[name]}"
    wait(
        lambda: requests.get(user, headers=ADMIN, timeout=30).json()["big_v"] == big_v,
        f"{name} big-V {big_v}",
    )


alice, bob, vip = client("alice"), client("bob"), client("vip")

# Credentials and accounts.
me = alice.account_verify_credentials()
check(me.username == "alice" and str(me.id) == str(IDS["alice"]), f"verify_credentials: {me}")
check(str(alice.account_lookup("bob").id) == str(IDS["bob"]), "lookup bob")

# Follow, through the library.
for name in ("bob", "vip"):
    rel = alice.account_follow(IDS[name])
    check(rel.following, f"following {name}: {rel}")
rels = alice.account_relationships([IDS["bob"], IDS["vip"]])
check(all(r.following for r in rels), f"relationships: {rels}")
check(
    str(IDS["alice"]) in [str(a.id) for a in bob.account_followers(IDS["bob"])],
    "alice among bob's followers",
)

# Posts, some in the same millisecond when the machine is quick; a retry
# with the same Idempotency-Key answers the first status.
posted = []
first = bob.status_post("retried", idempotency_key="once")
again = bob.status_post("retried", idempotency_key="once")
check(first.id == again.id, f"a retry posted twice: {first.id} {again.id}")
posted.append(first.id)
for i in range(40):
    author = bob if i % 3 else vip
    posted.append(author.status_post(f"before {i}").id)

# Scroll the home to its end while posts keep arriving, and vip is demoted
# (its posts pushed from then on) and promoted again (pulled) mid-scroll.
page = alice.timeline_home(limit=7)
top = page[0].id
seen = list(page)
arriving = []
pages = 1
while True:
    arriving.append((bob if pages % 2 else vip).status_post(f"during {pages}").id)
    if pages == 2:
        thresholds(100, 50, "vip", False)
    if pages == 4:
        thresholds(3, 1, "vip", True)
    page = alice.fetch_next(page)
    if not page:
        break
    pages += 1
    seen.extend(page)
ids = in_order(seen, "the scroll")
check(
    set(ids) == {str(i) for i in posted},
    f"the scroll holds exactly what was posted before it: {len(ids)} of {len(posted)}",
)
check(pages >= 5, f"the scroll took {pages} pages")

# A filtered home (filters v2): a hide filter on `before` leaves those out,
# pages stay full and every other status comes once; warn marks them.
def scroll_all(limit):
    got, sizes = [], []
    page = alice.timeline_home(limit=limit)
    while page:
        got.extend(page)
        sizes.append(len(page))
        page = alice.fetch_next(page)
    return got, sizes


unfiltered, _ = scroll_all(40)
hide = alice.create_filter_v2(
    "No befores", ["home"], "hide", keywords_attributes=[{"keyword": "before", "whole_word": True}]
)
check(hide.filter_action == "hide" and hide.keywords[0].keyword == "before", f"create_filter_v2 {hide!r}")
kept, sizes = scroll_all(7)
want = [str(s.id) for s in unfiltered if "before" not in s.content]
check(in_order(kept, "the filtered scroll") == want, f"the filtered scroll: {len(kept)} of {len(want)}")
check(all(n == 7 for n in sizes[:-1]), f"filtered pages are full: {sizes}")
alice.update_filter_v2(hide, filter_action="warn")
warned = [s for s in scroll_all(40)[0] if s.filtered]
check(len(warned) == len(unfiltered) - len(want), f"warned {len(warned)}")
check(all(w.filtered[0].filter.title == "No befores" and w.filtered[0].keyword_matches == ["before"] for w in warned), "the matches")
check([str(f.id) for f in alice.filters_v2()] == [str(hide.id)], "filters_v2")
keyword = alice.add_filter_keyword_v2(hide, "never-said", whole_word=False)
check(len(alice.filter_keywords_v2(hide)) == 2, "a keyword added")
alice.delete_filter_keyword_v2(keyword)
check([k.keyword for k in alice.filter_v2(hide).keywords] == ["before"], "a keyword removed")
alice.delete_filter_v2(hide)
check(alice.filters_v2() == [], "the filter deleted")

# Refresh: min_id pages up from the top, the closest first; nothing missed.
fresh = []
page = alice.timeline_home(min_id=top, limit=3)
while page:
    fresh = list(page) + fresh
    page = alice.fetch_previous(page)
check(
    in_order(fresh, "the refresh") == [str(i) for i in reversed(arriving)],
    f"the refresh holds what arrived during the scroll: {[s.id for s in fresh]} {arriving}",
)

# Lists: one of vip (a big-V: pulled) scrolled with fetch_next holds each
# of its statuses once, in order; bob added brings his past statuses at
# once; an exclusive list keeps its members out of the home until it goes.
home_now = [str(s.id) for s in scroll_all(40)[0]]
vips = [str(s.id) for s in scroll_all(40)[0] if str(s.account.id) == str(IDS["vip"])]
friends = alice.list_create("friends")
check(friends.title == "friends" and friends.replies_policy == "list" and not friends.exclusive, f"list_create {friends!r}")
alice.list_accounts_add(friends, [IDS["vip"]])


def scroll_list(lst, limit):
    got, page = [], alice.timeline_list(lst, limit=limit)
    while page:
        got.extend(page)
        page = alice.fetch_next(page)
    return in_order(got, "a list's scroll")


check(scroll_list(friends, 4) == vips, f"the list holds vip's statuses: {len(vips)}")
alice.list_accounts_add(friends, [IDS["bob"]])
check(scroll_list(friends, 6) == home_now, "bob's past statuses join the list at once")
members = [str(a.id) for a in alice.list_accounts(friends)]
check(sorted(members) == sorted([str(IDS["bob"]), str(IDS["vip"])]), f"list_accounts {members}")
check([str(x.id) for x in alice.account_lists(IDS["bob"])] == [str(friends.id)], "account_lists")
alice.list_accounts_delete(friends, [IDS["vip"]])
check(scroll_list(friends, 40) == [i for i in home_now if i not in vips], "vip left the list at once")
friends = alice.list_update(friends, "close friends", exclusive=True)
check(friends.exclusive and friends.title == "close friends", f"list_update {friends!r}")
check([str(s.id) for s in scroll_all(40)[0]] == vips, "bob's statuses left the home")
alice.list_delete(friends)
check([str(s.id) for s in scroll_all(40)[0]] == home_now, "bob's statuses came back home")
check(alice.lists() == [], "lists")

# Stream the home; drop the stream, post while away, reconnect, and fill
# the gap with min_id: each status once.
class Collect(StreamListener):
    def __init__(self):
        self.updates, self.deletes, self.ready = [], [], threading.Event()

    def handle_heartbeat(self):
        self.ready.set()

    def on_update(self, status):
        self.updates.append(status)

    def on_delete(self, status_id):
        self.deletes.append(str(status_id))


def stream():
    listener = Collect()
    handle = alice.stream_user(listener, run_async=True)
    wait(listener.ready.is_set, "the stream opened")
    return listener, handle


listener, handle = stream()
live = [bob.status_post("live 1").id, vip.status_post("live 2").id]
wait(lambda: len(listener.updates) >= 2, f"two updates: {listener.updates}")
handle.close()
last_seen = listener.updates[-1].id
away = [bob.status_post("away 1").id, vip.status_post("away 2").id]
listener2, handle2 = stream()
back = [vip.status_post("back 1").id]
wait(lambda: len(listener2.updates) >= 1, "an update after reconnecting")
gap = alice.timeline_home(min_id=last_seen, max_id=listener2.updates[0].id)
got = [str(s.id) for s in listener.updates] + [str(s.id) for s in reversed(gap)] + [
    str(s.id) for s in listener2.updates
]
check(
    got == [str(i) for i in live + away + back],
    f"stream, gap and stream again: {got} want {live + away + back}",
)

# Delete: the stream says so, the home no longer shows it.
gone = bob.status_delete(live[0])
check(str(gone.id) == str(live[0]), f"delete answers the status: {gone.id}")
wait(lambda: str(live[0]) in listener2.deletes, f"a delete event: {listener2.deletes}")
handle2.close()
check(
    str(live[0]) not in [str(s.id) for s in alice.timeline_home(limit=40)],
    "a deleted status left the home",
)

# A list's stream (stream_list): only its members' statuses, in order.
live_list = alice.list_create("live")
alice.list_accounts_add(live_list, [IDS["bob"]])
listed = Collect()
list_handle = alice.stream_list(live_list, listed, run_async=True)
wait(listed.ready.is_set, "the list stream opened")
vip.status_post("not in the list")
in_list = bob.status_post("in the list").id
wait(lambda: len(listed.updates) >= 1, f"an update of the list: {listed.updates}")
list_handle.close()
check([str(s.id) for s in listed.updates] == [str(in_list)], f"the list's stream: {listed.updates}")
alice.list_delete(live_list)

# An instance restart mid-stream: the library reconnects by itself (the
# service closes its streams as it stops), and the status posted while it
# reconnected is filled in with min_id and max_id: each status once.
listener3 = Collect()
handle3 = alice.stream_user(
    listener3, run_async=True, reconnect_async=True, reconnect_async_wait_sec=1
)
wait(listener3.ready.is_set, "the stream opened")
before = bob.status_post("before the restart").id
wait(lambda: len(listener3.updates) >= 1, f"an update before the restart: {listener3.updates}")
print("restart", flush=True)
check(sys.stdin.readline().strip() == "restarted", "the service restarted")
during = bob.status_post("while the stream reconnects").id
# The stream is back once a status posted after the restart arrives on it
# (a heartbeat could still come from the stopping instance, or the library
# reconnect a moment later): probes of the big-V until one arrives, those
# posted before the library reconnected being in the gap.
after = []
while not after or str(after[-1]) not in [str(s.id) for s in listener3.updates]:
    check(len(after) < 80, f"an update after the restart: {listener3.updates}")
    after.append(vip.status_post(f"after the restart {len(after) + 1}").id)
    deadline = time.time() + 0.5
    while time.time() < deadline and str(after[-1]) not in [str(s.id) for s in listener3.updates]:
        time.sleep(0.02)
handle3.close()
streamed = [str(s.id) for s in listener3.updates]
resumed = streamed[1:]
gap = alice.timeline_home(min_id=streamed[0], max_id=resumed[0], limit=40)
got = streamed[:1] + [str(s.id) for s in reversed(gap)] + resumed
want = [str(i) for i in [before, during] + after]
check(got == want, f"stream, restart, gap and stream: {got} want {want}")

# Mute and block, through the library.
check(alice.account_mute(IDS["bob"]).muting, "muting")
home = alice.timeline_home(limit=40)
check(
    home and all(str(s.account.id) != str(IDS["bob"]) for s in home),
    "no status of a muted account",
)
check(not alice.account_unmute(IDS["bob"]).muting, "unmuted")
check(
    any(str(s.account.id) == str(IDS["bob"]) for s in alice.timeline_home(limit=40)),
    "unmuted statuses are back",
)
rel = alice.account_block(IDS["vip"])
check(rel.blocking and not rel.following, f"blocking: {rel}")
check(
    all(str(s.account.id) != str(IDS["vip"]) for s in alice.timeline_home(limit=40)),
    "no status of a blocked account",
)
check(not alice.account_unblock(IDS["vip"]).blocking, "unblocked")
print(
    f"ok: {len(ids)} statuses scrolled in {pages} pages, {len(fresh)} refreshed, "
    f"{len(gap)} filled in after the restart"
)
