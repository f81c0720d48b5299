"""Which tree URLs and refs kperf accepts, and what it says about the rest."""

from __future__ import annotations

import pytest

from kperf.core.builds.gitops import GitInputError, validate_ref, validate_tree_url
from kperf.core.builds.tree_urls import SCHEMES, TreePolicy

# An operator who allows every scheme and local trees; the defaults have tests in test_tree_urls.py.
EVERYTHING = TreePolicy.build(schemes=SCHEMES, allow_local=True)
DEFAULTS_AND_LOCAL = TreePolicy.build(allow_local=True)

GOOD_URLS = [
    "https://git.kernel.org/pub/scm/linux/kernel/git/akpm/mm.git",
    "git://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git",
    "ssh://git@example.org/linux.git",
    "ssh://git@example.org:2222/linux.git",
    "git@example.org:people/linux.git",
    "/srv/git/linux.git",
    "file:///srv/git/linux.git",
]


@pytest.mark.parametrize("url", GOOD_URLS)
def test_it_accepts_the_usual_git_urls(url: str) -> None:
    assert validate_tree_url(url, EVERYTHING) == url


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ext::sh -c touch% /tmp/pwned", "transport"),
        ("ext::ssh -o ProxyCommand=x host", "transport"),
        ("fd::17", "transport"),
        ("http://example.org/linux.git", "http://"),
        ("ftp://example.org/linux.git", "ftp://"),
        ("-uhttps://example.org", "starts with '-'"),
        ("https://", "host"),
        ("https://example.org", "repository path"),
        ("https://example.org:notaport/x.git", "port"),
        ("https://[::1/x.git", "host"),
        ("https://a@127.0.0.1@example.org/x.git", "more than one '@'"),
        ("not a url", "white space"),
        ("relative/path", "not a git URL"),
        ("", "empty"),
        ("https://example.org/x.git\n", "white space"),
        ("https://example.org/" + "x" * 1000, "limit"),
    ],
)
def test_it_refuses_bad_urls_and_says_why(url: str, says: str) -> None:
    with pytest.raises(GitInputError) as exc:
        validate_tree_url(url, DEFAULTS_AND_LOCAL)
    assert says in str(exc.value)


def test_local_paths_can_be_turned_off() -> None:
    with pytest.raises(GitInputError, match="KPERF_ALLOW_LOCAL_TREES"):
        validate_tree_url("/srv/git/linux.git", TreePolicy.build(schemes=SCHEMES))
    with pytest.raises(GitInputError, match="KPERF_ALLOW_LOCAL_TREES"):
        validate_tree_url("file:///srv/git/linux.git", TreePolicy.build(schemes=SCHEMES))


@pytest.mark.parametrize("ref", ["master", "mm-unstable", "v6.1", "people/me/fork-vma", "a" * 40, "x.y_z"])
def test_it_accepts_valid_refs(ref: str) -> None:
    assert validate_ref(ref) == ref


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("a..b", "'..'"),
        ("-branch", "starts with '-'"),
        ("--upload-pack=x", "starts with '-'"),
        ("foo bar", "' '"),
        ("foo~1", "'~'"),
        ("foo^", "'^'"),
        ("a:b", "':'"),
        ("what?", "'?'"),
        ("star*", "'*'"),
        ("br[acket", "'['"),
        ("back\\slash", "'\\\\'"),
        ("/lead", "empty path component"),
        ("trail/", "empty path component"),
        ("a//b", "empty path component"),
        ("dot.", "ends with '.'"),
        (".hidden", "starting with '.'"),
        ("x/.y", "starting with '.'"),
        ("topic.lock", "'.lock'"),
        ("a@{1}", "'@{'"),
        ("@", "is '@'"),
        ("", "empty"),
        ("ctl\x01", "'\\x01'"),
    ],
)
def test_it_refuses_refs_git_would_refuse(ref: str, says: str) -> None:
    with pytest.raises(GitInputError) as exc:
        validate_ref(ref)
    assert says in str(exc.value)
