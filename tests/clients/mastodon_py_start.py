"""What Mastodon.py does on an app's start and on its home screen: the
instance (v1, v2 and the latest, which the library picks by the version it
reads), the server's version checked strictly, the caller's account and
preferences, custom emojis, announcements and followed hashtags. Each answer must parse
into the library's own entity and agree with the routes the service
serves.

Then it finds the harness's big-V by name (search v2) and follows it, as a
new user would, reads its own statuses back several at once, and sets its
home marker, which another device reads and pages on from; the big-V
reads, counts and dismisses its new-follower notifications, one by one and
grouped. Environment:
FEED_BASE (the service's URL), FEED_TOKENS and FEED_IDS (JSON: username ->
bearer token, account id).
"""

import json
import os
import sys
from urllib.parse import urlparse

from mastodon import Mastodon

BASE = os.environ["FEED_BASE"]
HOST = urlparse(BASE).netloc
TOKENS = json.loads(os.environ["FEED_TOKENS"])
IDS = json.loads(os.environ["FEED_IDS"])


def check(cond, what):
    if not cond:
        print("FAILED:", what, file=sys.stderr)
        sys.exit(1)


app = Mastodon(access_token=TOKENS["erin"], api_base_url=BASE, request_timeout=30)

# Strict: a failed instance read or a malformed version raises.
version = app.retrieve_mastodon_version(fail_hard=True)
check(version.startswith("4.3"), f"version {version!r}")
check(app.verify_minimum_version("4.0.0", cached=True), "not at least 4.0.0")

latest = app.instance()
check(latest.domain == HOST, f"instance v2 domain {latest.domain!r}")
check(latest.api_versions.mastodon == 2, f"api_versions {latest.api_versions!r}")
check(latest.configuration.urls.streaming.startswith("ws://"), "streaming URL")
check(app.instance_v1().uri == HOST, "instance v1 uri")
check(app.mastodon_api_version == 2, f"the library read API {app.mastodon_api_version}")
# The home screen's first calls: each parses into the library's entity.
me = app.account_verify_credentials()
check(me.username == "erin", f"verify_credentials {me.username!r}")
prefs = app.preferences()
check(prefs["posting:default:visibility"] == "public", f"preferences {prefs!r}")
check(app.custom_emojis() == [], "custom emojis")
check(app.announcements() == [], "announcements")
check(app.followed_tags() == [], "followed tags")
# Following by name goes through search v2, as command-line clients do.
found = app.search_v2("@VIP3", result_type="accounts")
names = [a.acct for a in found.accounts]
check(names == ["vip3", "vip3_fan_a", "vip3_fan_b"], f"search: exact first {names}")
check(str(found.accounts[0].id) == str(IDS["vip3"]), "the account found")
check(app.account_follow(found.accounts[0]).following, "the follow")
everything = app.search_v2(f"vip3@{HOST}", resolve=True)
check(everything.accounts[0].acct == "vip3", "a full handle: its account first")
check(everything.statuses == [] and everything.hashtags == [], "no statuses or hashtags")
check(app.search_v2("nobody_here").accounts == [], "a name nobody has")
# A page of two, then the next by the library's own offset paging.
page = app.search_v2("vip", result_type="accounts", limit=2)
check([a.acct for a in page.accounts] == ["vip3", "vip3_fan_a"], f"page {page!r}")
rest = app.fetch_next(page)
check([a.acct for a in rest.accounts] == ["vip3_fan_b"], f"next page {rest!r}")
# Several statuses at once (4.3), in the order asked.
first, second = app.status_post("first"), app.status_post("second")
both = app.statuses([second, first.id])
check([s.id for s in both] == [second.id, first.id], f"statuses {both!r}")
check(both[1].content == first.content, "the status read back")
# The reading position, shared by devices: the home marker, then a page
# on from it.
check(app.markers_get(["home", "notifications"]) == {}, "no markers yet")
set_ = app.markers_set("home", first)
check(set_.home.last_read_id == first.id and set_.home.version == 0, f"markers_set {set_!r}")
other_device = Mastodon(access_token=TOKENS["erin"], api_base_url=BASE, request_timeout=30)
marker = other_device.markers_get("home").home
check(marker.last_read_id == first.id, f"markers_get {marker!r}")
above = other_device.timeline_home(min_id=marker.last_read_id)
check([s.id for s in above] == [second.id], f"the page above the marker {above!r}")
moved = app.markers_set(["home", "notifications"], [second.id, "1"])
check(moved.home.version == 1 and moved.notifications.version == 0, f"moved {moved!r}")
# The big-V is told of its new follower; reads, counts and dismisses.
vip = Mastodon(access_token=TOKENS["vip3"], api_base_url=BASE, request_timeout=30)
told = vip.notifications(types=["follow"])
check(told[0].type == "follow" and told[0].account.acct == "erin", f"notifications {told!r}")
check(vip.notifications_unread_count().count == len(told), "unread count")
vip.markers_set("notifications", told[0])
check(vip.notifications_unread_count().count == 0, "unread after the marker")
check(vip.notifications(id=told[0].id).account.acct == "erin", "one notification")
# The same in groups (4.3's v2, which the library asks for at API 2).
grouped = vip.grouped_notifications()
group = grouped.notification_groups[0]
check(len(grouped.notification_groups) == 1 and group.type == "follow", f"grouped {grouped!r}")
check(group.notifications_count == len(told), f"a group of every follow {group!r}")
sampled = {str(a.id): a.acct for a in grouped.accounts}
check(sampled[str(group.sample_account_ids[0])] == "erin", f"the newest sampled first {grouped!r}")
whole = vip.grouped_notification(group.group_key)
check(whole.notification_groups[0].notifications_count == len(told), f"by its key {whole!r}")
fans = vip.grouped_notification_accounts(group.group_key)
check([a.acct for a in fans] == [n.account.acct for n in told], f"the group's accounts {fans!r}")
check(vip.unread_grouped_notifications_count() == 0, "no unread group after the marker")
single = vip.grouped_notifications(grouped_types=["mention"], limit=1)
check(single.notification_groups[0].group_key == f"ungrouped-{told[0].id}", f"ungrouped {single!r}")
if len(told) > 1:
    following = vip.fetch_next(single)
    key = following.notification_groups[0].group_key
    check(key == f"ungrouped-{told[1].id}", f"the next page {following!r}")
vip.notifications_dismiss(told[0])
check(all(n.id != told[0].id for n in vip.notifications()), "dismissed")
vip.dismiss_grouped_notification(group.group_key)
check(vip.notifications() == [], "the group dismissed whole")
vip.notifications_clear()
check(vip.notifications() == [], "cleared")
print(f"ok: version {version}, api {app.mastodon_api_version}, found {found.accounts[0].acct}")
