"""What the report file keeps of the command line: every secret-looking value redacted
(``introspection/exit_report.redact_argv``), in every syntax a command line carries one.

Generated (hypothesis): a secret name (a secret word, alone or inside a longer name, in
snake, kebab, camel or upper case) x the syntax it is given in x a value; and the other
way round, names that only contain a secret word's letters (``--max-tokens``,
``--tokenizer-type``, ``monkey``) keep their values, as do the arguments around them.
"""

from __future__ import annotations

import json
import string

from hypothesis import example, given
from hypothesis import strategies as st

from fl_patch.reporting.exit_report import names_secret, redact_argv

SECRET_WORDS = ("key", "token", "secret", "password", "passwd", "pwd", "passphrase", "credential", "auth", "apikey")
PREFIXES = ("", "api", "hf", "aws secret access", "client", "github", "db", "wandb")
SUFFIXES = ("", "file", "value", "id")


def _styled(words: list[str], style: str) -> str:
    if style == "snake":
        return "_".join(words)
    if style == "kebab":
        return "-".join(words)
    if style == "upper":
        return "_".join(words).upper()
    return words[0] + "".join(w.capitalize() for w in words[1:])  # camel


@st.composite
def secret_names(draw: st.DrawFn) -> str:
    words = [
        *draw(st.sampled_from(PREFIXES)).split(),
        draw(st.sampled_from(SECRET_WORDS)),
        *draw(st.sampled_from(SUFFIXES)).split(),
    ]
    return _styled(words, draw(st.sampled_from(("snake", "kebab", "upper", "camel"))))


# Values a secret could be: never a word the rest of the command line contains.
values = st.text(string.ascii_letters + string.digits + "-_.+/~", min_size=8, max_size=40).filter(
    lambda v: v.strip("-") == v and "0.1" not in v and "train" not in v
)

# In a URL's userinfo only unreserved characters appear as they are ("/" would end it: percent-encoded).
url_values = st.text(string.ascii_letters + string.digits + "-_.~", min_size=8, max_size=40)
token_bodies = st.text(string.ascii_letters + string.digits, min_size=8, max_size=40)


def _syntaxes(name: str, value: str) -> list[list[str]]:
    """The same secret, in each way a command line gives one."""
    return [
        [f"--{name}", value],
        [f"--{name}={value}"],
        [f"{name}={value}"],
        ["--config", json.dumps({name: value, "lr": 0.1})],
        ["--config", repr({name: value, "lr": 0.1})],
        ["--config", json.dumps({"outer": {name: value}})],
        ["--overrides", f"lr=0.1,{name}={value},layers=2"],
        ["--url", f"https://host/api?{name}={value}&page=2"],
        ["--header", f"{name}: {value}"],
    ]


@given(name=secret_names(), value=values)
def test_a_secret_value_is_redacted_in_every_syntax(name: str, value: str) -> None:
    for syntax in _syntaxes(name, value):
        argv = ["train.py", "--lr", "0.1", *syntax, "--layers", "2"]
        out = redact_argv(argv)
        assert value not in json.dumps(out), (argv, out)
        assert out[:3] == ["train.py", "--lr", "0.1"] and out[-2:] == ["--layers", "2"], out  # the rest is kept
        assert name in " ".join(out), out  # the name stays: the report says what was given


@given(user=url_values, value=url_values, scheme=st.sampled_from(("https", "http", "git+https", "redis", "postgresql")))
def test_url_userinfo_is_redacted(user: str, value: str, scheme: str) -> None:
    for url in (f"{scheme}://{user}:{value}@host.example/path", f"{scheme}://{value}@host.example/path"):
        out = redact_argv(["train.py", "--data", url])
        assert value not in json.dumps(out) and "host.example/path" in out[2], out


@given(value=values)
@example(value="00000KEY")  # an attached value that itself ends like a secret's name (found by hypothesis)
def test_dash_p_is_a_password(value: str) -> None:
    # -p is the password by convention (mysql, sshpass, -p/--password): its value is redacted,
    # given apart or attached (-pSECRET). A port or a plugin there is redacted too (documented).
    assert redact_argv(["prog", "-p", value]) == ["prog", "-p", "<redacted>"]
    assert value not in redact_argv(["prog", f"-p{value}"])[1]


@given(value=token_bodies)
def test_bearer_tokens_and_well_known_token_shapes_are_redacted(value: str) -> None:
    out = redact_argv(["prog", "--header", f"Authorization: Bearer {value}", "--x", f"sk-{value}{'a' * 16}"])
    assert value not in json.dumps(out), out


@given(
    name=st.sampled_from(
        ("max-tokens", "tokenizer-type", "monkey", "keyboard", "num-layers", "author", "passes", "hotkeys", "lr")
    ),
    value=st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=12),
)
def test_names_that_only_look_alike_keep_their_values(name: str, value: str) -> None:
    assert not names_secret(name)
    for syntax in ([f"--{name}", value], [f"--{name}={value}"], [f"{name}={value}"]):
        assert redact_argv(["train.py", *syntax]) == ["train.py", *syntax]


def test_the_examples_of_the_issue() -> None:
    argv = [
        "train.py",
        "--data",
        "https://user:ghp_SECRETTOKEN@github.com/org/repo.git",
        "-p",
        "hunter2",
        "--passphrase",
        "correct-horse",
        "--config",
        '{"api_key": "sk-live-123", "lr": 0.1}',
    ]
    out = redact_argv(argv)
    text = json.dumps(out)
    for secret in ("ghp_SECRETTOKEN", "hunter2", "correct-horse", "sk-live-123"):
        assert secret not in text, out
    assert "github.com/org/repo.git" in text and '"lr": 0.1' in out[-1], out
