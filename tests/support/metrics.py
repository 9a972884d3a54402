"""A node's /metrics as the tests read it: scraped into samples by family, and the one
sample of a family with given labels."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def scrape(address: str, names: tuple[str, ...] = ()) -> dict[str, list]:
    """Samples by family name (histograms under their family name); with ``names``, only
    the samples of those names (``name[]``)."""
    query = "?" + "&".join(f"name[]={name}" for name in names) if names else ""
    with urllib.request.urlopen(f"http://{address}/metrics{query}", timeout=5) as answer:
        text = answer.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(samples: dict[str, list], name: str, **labels: str) -> float:
    """The one sample called ``name`` (a family, or a histogram's ``_count``) with labels."""
    family = name.removesuffix("_count") if name.endswith("_count") else name
    found = [
        s.value
        for s in samples.get(family, [])
        if s.name in (name, name + "_total")
        and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (family, labels, found)
    return found[0]
