"""What Mastodon.py does on an app's start and on its home screen: the
instance (v1, v2 and the latest, which the library picks by the version it
reads), the server's version checked strictly, the caller's account and
preferences, custom emojis, announcements and followed hashtags. Each answer must parse
into the library's own entity and agree with the routes the service
serves.

Then it follows the harness's big-V, as a new user would. Environment:
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
check(latest.api_versions.mastodon == 1, f"api_versions {latest.api_versions!r}")
check(latest.configuration.urls.streaming.startswith("ws://"), "streaming URL")
check(app.instance_v1().uri == HOST, "instance v1 uri")
check(app.mastodon_api_version == 1, f"the library read API {app.mastodon_api_version}")
# The home screen's first calls: each parses into the library's entity.
me = app.account_verify_credentials()
check(me.username == "erin", f"verify_credentials {me.username!r}")
prefs = app.preferences()
check(prefs["posting:default:visibility"] == "public", f"preferences {prefs!r}")
check(app.custom_emojis() == [], "custom emojis")
check(app.announcements() == [], "announcements")
check(app.followed_tags() == [], "followed tags")
check(app.account_follow(IDS["vip3"]).following, "the follow")
print(f"ok: version {version}, api {app.mastodon_api_version}")
