"""``ferrymq user`` and ``ferrymq acl``, and the connection options every client command
shares (credentials and TLS).

Secrets are best given through the environment (``FERRYMQ_SECRET_KEY``; a command-line
value shows in the process list). ``user create`` reads the new user's secret key from
``--secret-key-env`` or prompts for it, and nothing ever prints a secret.
"""

from __future__ import annotations

import argparse
import getpass
import os

from ferrymq.cli.output import admin_of, show, show_table

CONNECTION_OPTIONS = {
    "--access-key": ("FERRYMQ_ACCESS_KEY", "sign calls as this user (or FERRYMQ_ACCESS_KEY)"),
    "--secret-key": ("FERRYMQ_SECRET_KEY", "its secret key (better: FERRYMQ_SECRET_KEY)"),
    "--tls-ca": ("FERRYMQ_TLS_CA", "speak TLS, trusting this PEM CA bundle (or 'system')"),
    "--tls-cert": ("FERRYMQ_TLS_CERT", "client certificate for mutual TLS (PEM)"),
    "--tls-key": ("FERRYMQ_TLS_KEY", "its private key (PEM)"),
}


def add_connection_options(common: argparse.ArgumentParser) -> None:
    for flag, (_, text) in CONNECTION_OPTIONS.items():
        common.add_argument(flag, help=text)


def apply_connection_options(args: argparse.Namespace) -> None:
    """Command-line values go to the environment the SDK reads (``ClientSecurity``)."""
    for flag, (variable, _) in CONNECTION_OPTIONS.items():
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value:
            os.environ[variable] = value


def add_security_commands(commands, common: argparse.ArgumentParser) -> None:
    user = commands.add_parser("user", help="users (access key / secret key) of a secured cluster")
    users = user.add_subparsers(dest="action", required=True)
    for name in ("create", "update"):
        change = users.add_parser(name, parents=[common])
        change.add_argument("user", metavar="ACCESS_KEY")
        if name == "create":
            change.add_argument("--admin", action="store_true", help="may call every Admin RPC")
        else:  # neither flag keeps the user's admin flag as it is
            rights = change.add_mutually_exclusive_group()
            rights.add_argument(
                "--admin", dest="admin", action="store_const", const=True, help="make an admin"
            )
            rights.add_argument(
                "--no-admin", dest="admin", action="store_const", const=False, help="drop admin"
            )
        change.add_argument(
            "--secret-key-env",
            metavar="VARIABLE",
            help="read the user's secret key from this environment variable (else a prompt"
            + ("; update: empty keeps the current key)" if name == "update" else ")"),
        )
        change.set_defaults(handler=user_create if name == "create" else user_update)
    delete = users.add_parser("delete", parents=[common])
    delete.add_argument("user", metavar="ACCESS_KEY")
    delete.set_defaults(handler=user_delete)
    users.add_parser("list", parents=[common]).set_defaults(handler=user_list)

    acl = commands.add_parser("acl", help="what users may publish and subscribe to")
    acls = acl.add_subparsers(dest="action", required=True)
    for name in ("grant", "revoke"):
        rule = acls.add_parser(name, parents=[common])
        rule.add_argument("user", metavar="ACCESS_KEY")
        rule.add_argument("action", choices=["publish", "subscribe"])
        target = rule.add_mutually_exclusive_group(required=True)
        target.add_argument("--topic", help="a topic name, '*', or a prefix ending in '*'")
        target.add_argument("--group", help="a consumer group name, '*', or a prefix*")
        rule.add_argument("--deny", action="store_true", help="a DENY rule (deny wins)")
        rule.set_defaults(handler=acl_grant if name == "grant" else acl_revoke)
    listing = acls.add_parser("list", parents=[common])
    listing.add_argument("user", metavar="ACCESS_KEY", nargs="?", help="only this user")
    listing.set_defaults(handler=acl_list)


def _secret_of(args, required: bool) -> str:
    if args.secret_key_env:
        secret = os.environ.get(args.secret_key_env, "")
        if not secret and required:
            raise ValueError(f"environment variable {args.secret_key_env} is empty")
        return secret
    prompt = f"secret key for {args.user}" + ("" if required else " (empty: keep)")
    return getpass.getpass(prompt + ": ")


def _user_view(user) -> dict:
    return {"access_key": user.access_key, "admin": user.admin, "acl": [str(r) for r in user.acl]}


def user_create(args) -> int:
    secret = _secret_of(args, required=True)
    with admin_of(args) as admin:
        user = admin.create_user(args.user, secret, args.admin)
    show(args, _user_view(user), f"created user {user.access_key}")
    return 0


def user_update(args) -> int:
    secret = _secret_of(args, required=False)
    with admin_of(args) as admin:
        user = admin.update_user(args.user, secret, args.admin)
    show(args, _user_view(user), f"updated user {user.access_key}")
    return 0


def user_delete(args) -> int:
    with admin_of(args) as admin:
        admin.delete_user(args.user)
    show(args, {"deleted": args.user}, f"deleted user {args.user}")
    return 0


def user_list(args) -> int:
    with admin_of(args) as admin:
        users = admin.list_users()
    show_table(
        args,
        [_user_view(u) for u in users],
        ["access key", "admin", "acl entries"],
        [[u.access_key, u.admin, len(u.acl)] for u in users],
    )
    return 0


def _rule(args):
    from ferrymq.client.admin import AclRule

    kind, pattern = ("TOPIC", args.topic) if args.topic is not None else ("GROUP", args.group)
    return AclRule("DENY" if args.deny else "ALLOW", args.action.upper(), kind, pattern)


def acl_grant(args) -> int:
    rule = _rule(args)
    with admin_of(args) as admin:
        user = admin.grant(args.user, rule)
    show(args, _user_view(user), f"{user.access_key}: {rule}")
    return 0


def acl_revoke(args) -> int:
    rule = _rule(args)
    with admin_of(args) as admin:
        user = admin.revoke(args.user, rule)
    show(args, _user_view(user), f"{user.access_key}: revoked {rule}")
    return 0


def acl_list(args) -> int:
    with admin_of(args) as admin:
        users = [u for u in admin.list_users() if args.user in (None, u.access_key)]
    rows = [[u.access_key, "admin: everything", ""] for u in users if u.admin]
    rows += [[u.access_key, str(rule), ""] for u in users for rule in u.acl]
    show_table(args, [_user_view(u) for u in users], ["access key", "rule", ""], rows)
    return 0
