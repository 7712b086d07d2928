"""Reading spans back from Arize Phoenix's REST API (standard library only), for
scripts/phoenix-check.sh and scripts/phoenix-joined.py."""
import json
import urllib.error
import urllib.parse
import urllib.request


def get(base, path, **q):
    """GET a Phoenix REST path, as JSON."""
    url = f"{base}{path}" + ("?" + urllib.parse.urlencode(q) if q else "")
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def project_spans(base, project):
    """Every span of a project, following the REST API's cursor (1000 a page at most); none
    when the project does not exist yet (it appears with its first span)."""
    out, cursor = [], None
    while True:
        q = {"limit": "1000"}
        if cursor:
            q["cursor"] = cursor
        try:
            page = get(base, f"/v1/projects/{urllib.parse.quote(project)}/spans", **q)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return []
            raise
        out += page["data"]
        cursor = page.get("next_cursor")
        if not cursor:
            return out
