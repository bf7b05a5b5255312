"""Requests on MessageAPI, logging in first when the API needs it."""

from __future__ import annotations

from seetjax.envs.generated.plans.base import Action, PlanContext, call, needs, query, quoted, words_of
from seetjax.envs.generated.vocab import vocab


def _message_login(ctx: PlanContext) -> Action | None:
    api = ctx.instance("MessageAPI")
    if api.current_user:
        return None
    user_id = ctx.rng.choice(list(api.user_map.values()))
    return Action("msg.login", (call("message_login", user_id=user_id),),
                  {"user_id": quoted(user_id)})


# Proposes the login first when nobody is logged in to the messaging app.
_logged_in = needs(_message_login)


@_logged_in
def msg_send(ctx: PlanContext) -> Action | None:
    api = ctx.instance("MessageAPI")
    name = ctx.rng.choice(list(api.user_map))
    text = ctx.rng.choice(vocab("message", ctx.split))
    return Action("msg.send", (call("get_user_id", user=name),
                               call("send_message", receiver_id=api.user_map[name], message=text)),
                  {"person": name, "message": quoted(text)}, "message")


@_logged_in
def msg_add_and_send(ctx: PlanContext) -> Action | None:
    api = ctx.instance("MessageAPI")
    fresh = [p for p in vocab("person", ctx.split) if p not in api.user_map]
    if not fresh:
        return None
    name, text = ctx.rng.choice(fresh), ctx.rng.choice(vocab("message", ctx.split))
    new_id = f"USR{api.user_count + 1:03d}"  # add_contact's numbering; its output tells the model
    return Action("msg.add_and_send", (call("add_contact", user_name=name),
                                       call("send_message", receiver_id=new_id, message=text)),
                  {"person": name, "message": quoted(text)}, "message")


def msg_add_contact(ctx: PlanContext) -> Action | None:
    api = ctx.instance("MessageAPI")
    fresh = [p for p in vocab("person", ctx.split) if p not in api.user_map]
    if not fresh:
        return None
    name = ctx.rng.choice(fresh)
    return Action("msg.add_contact", (call("add_contact", user_name=name),), {"person": name})


@_logged_in
def msg_delete(ctx: PlanContext) -> Action | None:
    api = ctx.instance("MessageAPI")
    names = {user_id: name for name, user_id in api.user_map.items()}
    receivers = sorted({next(iter(m)) for m in api.inbox} & set(names))
    if not receivers:
        return None
    receiver = ctx.rng.choice(receivers)
    return Action("msg.delete", (call("get_user_id", user=names[receiver]),
                                 call("delete_message", receiver_id=receiver)),
                  {"person": names[receiver]})


@_logged_in
def msg_search(ctx: PlanContext) -> Action | None:
    words = sorted({w for m in ctx.instance("MessageAPI").inbox for w in words_of(next(iter(m.values())))})
    if not words:
        return None
    keyword = ctx.rng.choice(words)
    return Action("msg.search", (call("search_messages", keyword=keyword),),
                  {"keyword": quoted(keyword)}, "keyword")


PROPOSERS = (msg_send, msg_send, msg_add_and_send, msg_add_contact, msg_delete, msg_search,
             _logged_in(query("msg.view", "view_messages_sent")),
             _logged_in(query("msg.stats", "get_message_stats")),
             query("msg.list_users", "list_users"))
