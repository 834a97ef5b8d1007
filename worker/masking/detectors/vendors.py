"""Tokens of known vendors, recognised by their shape wherever they stand: a prefix the
vendor puts there on purpose (`glpat-`, `sk_live_`, `hf_`, `AIza`) and the length and
alphabet that follow. The families are the ones secret scanners know (gitleaks'
default rules, GitHub secret scanning); docs/MASKING.md has the table.

Each family is a detector of its own (its name is the `meta.masked` key), so a false
alarm of one is turned off without the others. They run before the key-value
detectors: `GITLAB_TOKEN=glpat-...` counts as a GitLab token. Patterns run on RE2, in
time linear in the text: a long run of token characters after many prefixes is read
once.
"""

from dataclasses import dataclass
from functools import cache

from worker.masking.detectors.base import (
    SECRETS,
    Anchor,
    Apply,
    Detector,
    Edit,
    register,
)
from worker.masking.linear_regex import LinearPattern
from worker.masking.text import MASK_PREFIX, TextView

_W = r"[A-Za-z0-9_\-]"  # base64url and the like


@dataclass(frozen=True, slots=True)
class Shape:
    pattern: str  # RE2; a group named `secret`, when given, is what is masked
    replacement: str


@dataclass(frozen=True, slots=True)
class Vendor:
    name: str  # the detector's name
    family: str  # for docs/MASKING.md
    shapes: tuple[Shape, ...]
    # (literal, pattern) per anchor: the literal every match holds (case matters), and
    # a pattern holding it that every match holds too, for short or common literals.
    anchors: tuple[tuple[str, str | None], ...]

    @property
    def replacement(self) -> str:
        return self.shapes[0].replacement


def _vendor(
    name: str,
    family: str,
    pattern: str,
    prefixes: tuple[str, ...],
    *,
    anchor_pattern: str | None = None,
    replacement: str | None = None,
) -> Vendor:
    mask = replacement or f"[MASKED_{name.upper()}]"
    anchors = tuple((p, anchor_pattern) for p in prefixes)
    return Vendor(name, family, (Shape(pattern, mask),), anchors)


# Before a token: no letter, digit, `_` or `-` (it is not the tail of a longer word).
_START = r"(?:^|[^A-Za-z0-9_\-])"

VENDORS: tuple[Vendor, ...] = (
    Vendor(
        "github_token",
        "GitHub",
        (
            Shape(
                rf"{_START}(?P<secret>gh[pousr]_[A-Za-z0-9]{{30,255}})\b", "[MASKED_GITHUB_TOKEN]"
            ),
            Shape(
                rf"{_START}(?P<secret>github_pat_[A-Za-z0-9_]{{22,255}})\b", "[MASKED_GITHUB_TOKEN]"
            ),
        ),
        tuple((p, None) for p in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    ),
    Vendor(
        "slack_token",
        "Slack",
        (
            Shape(rf"{_START}(?P<secret>xox[abposre]-[A-Za-z0-9\-]{{8,}})", "[MASKED_SLACK_TOKEN]"),
            Shape(rf"{_START}(?P<secret>xapp-[0-9]+-[A-Za-z0-9\-]{{8,}})", "[MASKED_SLACK_TOKEN]"),
            Shape(
                r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<secret>[A-Za-z0-9_/\-]{8,})",
                "[MASKED_SLACK_WEBHOOK]",
            ),
        ),
        (
            *((f"xox{c}-", None) for c in "abposre"),
            ("xapp-", None),
            ("hooks.slack.com", None),
        ),
    ),
    _vendor(
        "gitlab_token",
        "GitLab",
        rf"{_START}(?P<secret>(?:gl(?:pat|dt|rt|cbt|ptt|soat|ffct|ft|imt|agent|oas)-"
        r"[A-Za-z0-9_.\-]{20,}|GR1348941[A-Za-z0-9_\-]{20,}))",
        (
            "glpat-",
            "gldt-",
            "glrt-",
            "glcbt-",
            "glptt-",
            "glsoat-",
            "glffct-",
            "glft-",
            "glimt-",
            "glagent-",
            "gloas-",
            "GR1348941",
        ),
    ),
    _vendor(
        "stripe_key",
        "Stripe",
        rf"{_START}(?P<secret>(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{{10,}}|whsec_[A-Za-z0-9+/=]{{20,}})",
        ("sk_live_", "sk_test_", "sk_prod_", "rk_live_", "rk_test_", "rk_prod_", "whsec_"),
    ),
    _vendor(
        "openai_key",
        "OpenAI",
        rf"{_START}(?P<secret>sk-(?:proj|svcacct|admin|None)-{_W}{{20,}}"
        r"|sk-[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})",
        ("sk-proj-", "sk-svcacct-", "sk-admin-", "sk-None-", "T3BlbkFJ"),
    ),
    _vendor(
        "anthropic_key",
        "Anthropic",
        rf"{_START}(?P<secret>sk-ant-[a-z]{{3,5}}[0-9]{{2}}-{_W}{{20,}})",
        ("sk-ant-",),
    ),
    _vendor(
        "google_api_key",
        "Google API keys",
        rf"{_START}(?P<secret>AIza{_W}{{35}})",
        ("AIza",),
    ),
    _vendor(
        "google_oauth_token",
        "Google OAuth (access and refresh tokens, client secrets)",
        rf"{_START}(?P<secret>ya29\.[A-Za-z0-9_.\-]{{20,}}|1//0{_W}{{30,}}|GOCSPX-{_W}{{20,}})",
        ("ya29.", "1//0", "GOCSPX-"),
    ),
    _vendor("npm_token", "npm", rf"{_START}(?P<secret>npm_[A-Za-z0-9]{{36}})", ("npm_",)),
    _vendor("pypi_token", "PyPI", rf"{_START}(?P<secret>pypi-AgE{_W}{{50,}})", ("pypi-AgE",)),
    _vendor(
        "sendgrid_key",
        "SendGrid",
        rf"{_START}(?P<secret>SG\.{_W}{{16,32}}\.{_W}{{16,64}})",
        ("SG.",),
        anchor_pattern=r"SG\.[A-Za-z0-9_\-]{16}",
    ),
    _vendor(
        "huggingface_token",
        "Hugging Face",
        rf"{_START}(?P<secret>(?:hf|api_org)_[A-Za-z0-9]{{30,}})",
        ("hf_", "api_org_"),
    ),
    _vendor(
        "vault_token",
        "HashiCorp Vault",
        rf"{_START}(?P<secret>hv[sbr]\.{_W}{{24,}})",
        ("hvs.", "hvb.", "hvr."),
    ),
    _vendor(
        "telegram_bot_token",
        "Telegram bot tokens",
        rf"(?:{_START}|bot)(?P<secret>[0-9]{{8,10}}:AA{_W}{{33}})\b",  # also in `/bot<token>/`
        (":AA",),
        anchor_pattern=r"[0-9]{8}:AA[A-Za-z0-9_\-]{33}",
    ),
    _vendor(
        "discord_webhook",
        "Discord webhooks",
        r"discord(?:app)?\.com/api/webhooks/[0-9]{17,20}/(?P<secret>[A-Za-z0-9_\-]{60,68})",
        ("discord.com/api/webhooks/", "discordapp.com/api/webhooks/"),
    ),
    _vendor(
        "azure_client_secret",
        "Azure AD client secrets",
        r"(?:^|[^A-Za-z0-9_~.\-])(?P<secret>[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.\-]{31,34})",
        ("Q~",),
        anchor_pattern=r"[0-9]Q~[A-Za-z0-9_~.\-]{31}",
    ),
    _vendor(
        "twilio_key",
        "Twilio API keys",
        rf"{_START}(?P<secret>SK[0-9a-fA-F]{{32}})\b",
        ("SK",),
        anchor_pattern=r"SK[0-9a-fA-F]{32}",
    ),
    _vendor(
        "shopify_token",
        "Shopify",
        rf"{_START}(?P<secret>shp(?:at|ca|pa|ss)_[a-fA-F0-9]{{32}})",
        ("shpat_", "shpca_", "shppa_", "shpss_"),
    ),
    _vendor(
        "digitalocean_token",
        "DigitalOcean",
        rf"{_START}(?P<secret>do[opr]_v1_[a-f0-9]{{64}})",
        ("dop_v1_", "doo_v1_", "dor_v1_"),
    ),
    _vendor(
        "dockerhub_token",
        "Docker Hub",
        rf"{_START}(?P<secret>dckr_(?:pat|oat)_{_W}{{20,}})",
        ("dckr_pat_", "dckr_oat_"),
    ),
    _vendor(
        "grafana_token",
        "Grafana",
        rf"{_START}(?P<secret>glc_[A-Za-z0-9+/]{{32,}}={{0,2}}|glsa_[A-Za-z0-9]{{32}}_[A-Fa-f0-9]{{8}}"
        r"|eyJrIjoi[A-Za-z0-9]{50,}={0,2})",
        ("glc_", "glsa_", "eyJrIjoi"),
    ),
    _vendor(
        "atlassian_token",
        "Atlassian",
        rf"{_START}(?P<secret>AT[AC]TT3[A-Za-z0-9_=\-]{{150,}})",
        ("ATATT3", "ATCTT3"),
    ),
    _vendor(
        "linear_key", "Linear", rf"{_START}(?P<secret>lin_api_[A-Za-z0-9]{{40}})", ("lin_api_",)
    ),
    _vendor(
        "postman_key",
        "Postman",
        rf"{_START}(?P<secret>PMAK-[a-f0-9]{{24}}-[a-f0-9]{{34}})",
        ("PMAK-",),
    ),
    _vendor(
        "sentry_token",
        "Sentry",
        rf"{_START}(?P<secret>sntry[us]_[A-Za-z0-9_+/=]{{40,}})",
        ("sntrys_", "sntryu_"),
    ),
    _vendor(
        "newrelic_key",
        "New Relic",
        rf"{_START}(?P<secret>NRAK-[A-Z0-9]{{27}}|NRII-{_W}{{32}}|NRJS-[a-f0-9]{{19}})",
        ("NRAK-", "NRII-", "NRJS-"),
    ),
    _vendor(
        "databricks_token",
        "Databricks",
        rf"{_START}(?P<secret>dapi[a-f0-9]{{32}}(?:-[0-9])?)",
        ("dapi",),
        anchor_pattern=r"dapi[a-f0-9]{32}",
    ),
    _vendor(
        "doppler_token",
        "Doppler",
        rf"{_START}(?P<secret>dp\.(?:pt|st|ct|sa|scim|audit)\.[A-Za-z0-9]{{40,}})",
        ("dp.pt.", "dp.st.", "dp.ct.", "dp.sa.", "dp.scim.", "dp.audit."),
    ),
    _vendor("pulumi_token", "Pulumi", rf"{_START}(?P<secret>pul-[a-f0-9]{{40}})", ("pul-",)),
    _vendor("heroku_key", "Heroku", rf"{_START}(?P<secret>HRKU-{_W}{{58,}})", ("HRKU-",)),
    _vendor(
        "jfrog_token",
        "JFrog Artifactory",
        rf"{_START}(?P<secret>AKCp[A-Za-z0-9]{{69}}|cmVmd[A-Za-z0-9]{{59}})",
        ("AKCp", "cmVmd"),
    ),
    _vendor(
        "mapbox_token",
        "Mapbox (secret tokens)",
        rf"{_START}(?P<secret>sk\.eyJ[A-Za-z0-9_.\-]{{50,}})",
        ("sk.eyJ",),
    ),
    _vendor(
        "age_secret_key",
        "age",
        r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
        ("AGE-SECRET-KEY-1",),
    ),
    _vendor(
        "terraform_token",
        "Terraform Cloud",
        r"(?P<secret>[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,70})",
        (".atlasv1.",),
    ),
    _vendor(
        "mailgun_key",
        "Mailgun",
        rf"{_START}(?P<secret>key-[a-f0-9]{{32}})\b",
        ("key-",),
        anchor_pattern=r"key-[a-f0-9]{32}",
    ),
    _vendor(
        "vendor_token",
        "others: Perplexity, Notion, PlanetScale, Square, RubyGems, Dynatrace, Fly.io, "
        "1Password, Prefect, ReadMe, Shippo, Brevo, Duffel, EasyPost, Frame.io, Clojars, "
        "Infracost, Scalingo",
        rf"{_START}(?P<secret>pplx-[A-Za-z0-9]{{48}}|ntn_[0-9]{{11}}[A-Za-z0-9]{{35}}"
        r"|pscale_(?:tkn|oauth|pw)_[A-Za-z0-9_=.\-]{32,64}|sq0(?:atp|csp)-[A-Za-z0-9_\-]{22,}"
        r"|rubygems_[a-f0-9]{48}|dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}"
        r"|fo1_[A-Za-z0-9_\-]{43}|fm[12][ar]?_[A-Za-z0-9+/]{100,}={0,3}"
        r"|ops_eyJ[A-Za-z0-9+/]{250,}={0,3}|pnu_[A-Za-z0-9]{36}|rdme_[a-z0-9]{70}"
        r"|shippo_(?:live|test)_[a-fA-F0-9]{40}|xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}"
        r"|duffel_(?:test|live)_[A-Za-z0-9_=\-]{43}|EZ[AT]K[A-Za-z0-9]{54}"
        r"|fio-u-[A-Za-z0-9_=\-]{64}|CLOJARS_[A-Za-z0-9]{60}|ico-[A-Za-z0-9]{32}"
        r"|tk-us-[A-Za-z0-9_\-]{48})",
        (
            "pplx-",
            "ntn_",
            "pscale_",
            "sq0atp-",
            "sq0csp-",
            "rubygems_",
            "dt0c01.",
            "fo1_",
            "fm1a_",
            "fm1r_",
            "fm1_",
            "fm2_",
            "ops_eyJ",
            "pnu_",
            "rdme_",
            "shippo_",
            "xkeysib-",
            "duffel_",
            "EZAK",
            "EZTK",
            "fio-u-",
            "CLOJARS_",
            "ico-",
            "tk-us-",
        ),
        replacement="[MASKED_TOKEN]",
    ),
)


def _detector(vendor: Vendor) -> Apply:
    # Compiled at the first text that holds an anchor, not at import: thirty-odd RE2
    # programs cost the start-up of `prompt-worker mask` and `render` milliseconds.
    @cache
    def shapes() -> tuple[tuple[LinearPattern, str], ...]:
        return tuple((LinearPattern(s.pattern), s.replacement) for s in vendor.shapes)

    def apply(view: TextView) -> list[Edit]:
        text = view.text
        edits: list[Edit] = []
        for pattern, replacement in shapes():
            group: str | int = "secret" if "secret" in pattern.groupindex else 0
            for start, end in pattern.spans(text, group):
                if end > start and not text.startswith(MASK_PREFIX, start):
                    edits.append((start, end, replacement))
        return edits

    return apply


register(
    *(
        Detector(
            v.name,
            SECRETS,
            v.replacement,
            tuple(Anchor(literal, caseless=False, pattern=p) for literal, p in v.anchors),
            _detector(v),
        )
        for v in VENDORS
    )
)

ORDER = tuple(v.name for v in VENDORS)
