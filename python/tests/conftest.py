import pytest

import brevis
from corpus import CORPUS, CORPUS_FILES, corpus_name


@pytest.fixture(scope="session")
def packed(tmp_path_factory):
    """Every corpus file packed once (level 1: the tests are about reading)."""
    assert CORPUS_FILES, f"no corpus under {CORPUS}: run scripts/fetch-corpus.sh"
    out = tmp_path_factory.mktemp("packed")
    archives = {}
    for src in CORPUS_FILES:
        dst = out / f"{corpus_name(src)}.brv"
        brevis.pack(src, dst, level=1)
        archives[src] = dst
    return archives
