"""Serving: ``serve`` the HTTP API and the inspector, and the API ``keys`` it takes."""

from __future__ import annotations

import click

from tether.cli._base import errors_as_messages, existing_url, json_option, main, open_existing
from tether.cli._render import console, emit_json, table

_DB_HELP = "store URL or SQLite path, which must exist (default: $TETHER_URL, then ./tether.db)"


@main.command()
@click.option("--db", metavar="URL", help=_DB_HELP)
@click.option("--host", default="127.0.0.1", show_default=True, help="address to bind (loopback by default)")
@click.option(
    "--port", default=8700, show_default=True, type=click.IntRange(0, 65535), help="port to listen on (0: any free one)"
)
@click.option("--no-auth", is_flag=True, help="answer without API keys (loopback hosts only)")
@click.option("--tenant", default="default", show_default=True, help="the tenant of --no-auth mode")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="tether's lines on stderr (info: one per request, and per run the server makes)",
)
@errors_as_messages
def serve(db: str | None, host: str, port: int, no_auth: bool, tenant: str, log_level: str) -> None:
    """The HTTP API (/v1, OpenAPI at /openapi.json) and the web inspector (/), for one store.

    Operators' endpoints: /healthz and /readyz (open: probes carry no key), /metrics (Prometheus
    text, with a key like the API; tether's own metrics need opentelemetry-sdk)."""
    import ipaddress

    try:
        loopback = host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if no_auth and not loopback:
        raise click.ClickException(f"--no-auth is refused on {host}: it would open every task to the network")
    try:
        import uvicorn

        from tether.serve import create_app
    except ImportError:
        raise click.ClickException("tether serve needs its extra: pip install 'tether[serve]'") from None
    from tether.serve.operations import serve_metrics
    from tether.store.base import redact_url
    from tether.telemetry.logs import log_to_stderr

    url = existing_url(db)  # before anything is turned on: a refused database leaves the process as it was
    log_to_stderr(log_level)
    serve_metrics()
    asgi = create_app(url, no_auth=no_auth, tenant=tenant)
    err = console(stderr=True)
    mode = f"without keys, as tenant {tenant!r}" if no_auth else "API keys required (`tether keys create`)"
    err.print(f"tether serve on http://{host}:{port}/ for {redact_url(url)}; {mode}")
    # uvicorn's own access lines are off: tether's access log (tether.serve.access) says the same, with the tenant.
    uvicorn.run(asgi, host=host, port=port, log_level=log_level, access_log=False)


@main.group()
def keys() -> None:
    """API keys for `tether serve`: each bound to one tenant; only a hash is stored."""


@keys.command("create")
@click.option("--db", metavar="URL", help=_DB_HELP)
@click.option("--tenant", required=True, help="the tenant the key acts in")
@click.option("--name", required=True, help="who holds it: recorded as the actor of its writes")
@errors_as_messages
def keys_create(db: str | None, tenant: str, name: str) -> None:
    """Make a key and print it once: it cannot be shown again."""
    from tether.serve.keys import KeyRing

    secret, key = KeyRing(open_existing(db)).create(tenant=tenant, name=name)
    click.echo(secret)
    note = f"key {key.key_id} for tenant {tenant!r} ({name}); keep it: it is shown once"
    console(stderr=True).print(note)


@keys.command("list")
@click.option("--db", metavar="URL", help=_DB_HELP)
@json_option
@errors_as_messages
def keys_list(db: str | None, as_json: bool) -> None:
    """The keys: id, tenant, name, when made, revoked or not (never the secret)."""
    from dataclasses import asdict
    from datetime import UTC, datetime

    from tether.serve.keys import KeyRing

    found = KeyRing(open_existing(db)).list()
    if as_json:  # a page like every list (one: keys are few), its times in UTC with the offset like every time
        items = [{**asdict(k), "created_at": datetime.fromtimestamp(k.created_at, UTC).isoformat()} for k in found]
        emit_json({"items": items, "total": len(found), "limit": len(found), "offset": 0, "page": 1, "next_page": None})
        return
    listing = table("id", "tenant", "name", "created", "revoked")
    for k in found:
        made = datetime.fromtimestamp(k.created_at, UTC).isoformat(" ", "seconds")
        listing.add_row(k.key_id, k.tenant, k.name, made, "yes" if k.revoked else "")
    console().print(listing if found else "no keys (`tether keys create` makes one)")


@keys.command("revoke")
@click.argument("key_id")
@click.option("--db", metavar="URL", help=_DB_HELP)
@errors_as_messages
def keys_revoke(key_id: str, db: str | None) -> None:
    """Revoke a key: requests made with it are refused from now on."""
    from tether.serve.keys import KeyRing

    key = KeyRing(open_existing(db)).revoke(key_id)
    click.echo(f"revoked {key.key_id} ({key.tenant}, {key.name})")
