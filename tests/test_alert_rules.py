"""The example alert rules and Grafana dashboard in deploy/ (issue 25, item 7),
checked with Prometheus' own promtool:

  - `promtool check rules` parses every rule, and `promtool test rules` runs
    deploy/prometheus/mcfs-alerts.test.yml: series shaped like a daemon's,
    and which alerts fire with which labels and text;
  - every dashboard query, with Grafana's variables given values, is parsed by
    promtool as a recording rule;
  - every metric the rules and the dashboard name is one a real mount exports.
"""
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT, mcfs_mount, need_root
from test_metrics import free_port, scrape, strict_parse

RULES = os.path.join(ROOT, "deploy", "prometheus", "mcfs-alerts.yml")
RULE_TESTS = os.path.join(ROOT, "deploy", "prometheus", "mcfs-alerts.test.yml")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "mcfs-dashboard.json")

promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                              reason="needs promtool (Debian package prometheus)")


def run(*args):
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@promtool
def test_rules_parse_and_fire_as_written():
    assert "SUCCESS: 9 rules found" in run("promtool", "check", "rules", RULES)
    assert "SUCCESS" in run("promtool", "test", "rules", RULE_TESTS)


def dashboard_exprs():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    assert len(exprs) >= 12
    return exprs


@promtool
def test_dashboard_queries_parse(tmp_path):
    rules = []
    for i, e in enumerate(dashboard_exprs()):
        m = re.fullmatch(r"label_values\((.*), \w+\)", e)
        e = m.group(1) if m else e  # Grafana's function around a selector
        e = e.replace("$__rate_interval", "5m").replace("$instance", ".+")
        rules.append({"record": "mcfs_dashboard:panel%d" % i, "expr": e})
    path = tmp_path / "dashboard-rules.yml"
    # JSON is YAML: promtool reads it as a rule file
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    assert "SUCCESS: %d rules found" % len(rules) in run("promtool", "check", "rules",
                                                         str(path))


def test_every_metric_named_is_exported(tmp):
    need_root()
    with open(RULES) as f:
        text = f.read() + "\n".join(dashboard_exprs())
    named = set(re.findall(r"\b((?:mcfs|process)_[a-z_]+)\b", text))
    (tmp / "src" / "f").write_bytes(b"x" * 4096)
    port = free_port()
    with mcfs_mount(str(tmp / "src"), str(tmp / "mnt"),
                    opts=["metrics=127.0.0.1:%d" % port, "cache_dir=%s" % (tmp / "cache")]) as m:
        assert open(m.p("f"), "rb").read() == b"x" * 4096
        fams = strict_parse(scrape(port))
    exported = {name for _, samples in fams.values() for name, _ in samples}
    missing = named - exported
    assert not missing, "named in deploy/ but not exported: %s" % sorted(missing)
