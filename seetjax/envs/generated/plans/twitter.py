"""Requests on TwitterAPI (BFCL's posting API): tweets, retweets, comments, mentions and
follows, logging in when needed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seetjax.envs.generated.plans.base import (
    Action,
    PlanContext,
    call,
    listed,
    named,
    needs,
    password_login,
    pick,
    query,
    quoted,
    words_of,
)
from seetjax.envs.generated.vocab import vocab

_login = password_login("TwitterAPI", "tw.login", "authenticate_twitter",
                        lambda api: api.authenticated)
_logged_in = needs(_login)


def _api(ctx: PlanContext) -> Any:
    return ctx.instance("TwitterAPI")


def _tweet(ctx: PlanContext, allowed: Callable[[dict[str, Any]], bool] = lambda t: True
           ) -> tuple[dict[str, Any], str] | None:
    """A tweet and how the user names it: by id, or by its text if the plan posted it."""
    tweets = list(_api(ctx).tweets.values())
    return named(ctx, [t for t in tweets if allowed(t)], tweets,
                 predates=lambda t: t["id"] < ctx.initial_config["TwitterAPI"]["tweet_counter"],
                 by_id=lambda t: f"tweet {t['id']}", described=lambda t: f"my tweet {t['content']!r}")


def _people(ctx: PlanContext) -> list[str]:
    """Usernames the user can name: the ones they follow and the tweets' authors."""
    api = _api(ctx)
    names = {*api.following_list, *(t["username"] for t in api.tweets.values())}
    return sorted(names - {api.username})


def _stranger(ctx: PlanContext) -> str | None:
    """A username of `split`'s people that the user does not follow yet."""
    person = ctx.rng.choice(vocab("person", ctx.split)).lower()
    name = f"{person}_{ctx.rng.randint(10, 99)}"
    return None if name in _api(ctx).following_list or name == _api(ctx).username else name


@_logged_in
def tw_post(ctx: PlanContext) -> Action | None:
    content = ctx.rng.choice(vocab("tweet", ctx.split))
    tags = [f"#{t}" for t in ctx.rng.sample(vocab("hashtag", ctx.split), ctx.rng.randint(0, 2))]
    if not tags:
        return Action("tw.post", (call("post_tweet", content=content),),
                      {"content": quoted(content)}, "content")
    return Action("tw.post_tags", (call("post_tweet", content=content, tags=tags),),
                  {"content": quoted(content), "tags": listed(tags)}, "content")


@_logged_in
def tw_post_mention(ctx: PlanContext) -> Action | None:
    person = pick(ctx, _people(ctx))
    if person is None:
        return None
    content = ctx.rng.choice(vocab("tweet", ctx.split))
    return Action("tw.post_mention", (call("post_tweet", content=content, mentions=[f"@{person}"]),),
                  {"content": quoted(content), "person": f"@{person}"}, "person")


@_logged_in
def tw_retweet(ctx: PlanContext) -> Action | None:
    done = _api(ctx).retweets.get(_api(ctx).username, [])
    found = _tweet(ctx, lambda t: t["id"] not in done)
    if found is None:
        return None
    return Action("tw.retweet", (call("retweet", tweet_id=found[0]["id"]),), {"ref": found[1]})


@_logged_in
def tw_comment(ctx: PlanContext) -> Action | None:
    found = _tweet(ctx)
    if found is None:
        return None
    text = ctx.rng.choice(vocab("comment", ctx.split))
    return Action("tw.comment", (call("comment", tweet_id=found[0]["id"], comment_content=text),),
                  {"ref": found[1], "comment": quoted(text)}, "comment")


def tw_mention(ctx: PlanContext) -> Action | None:
    found, person = _tweet(ctx), pick(ctx, _people(ctx))
    if found is None or person is None:
        return None
    return Action("tw.mention", (call("mention", tweet_id=found[0]["id"],
                                      mentioned_usernames=[f"@{person}"]),),
                  {"ref": found[1], "person": f"@{person}"}, "person")


@_logged_in
def tw_follow(ctx: PlanContext) -> Action | None:
    name = _stranger(ctx)
    if name is None:
        return None
    return Action("tw.follow", (call("follow_user", username_to_follow=name),), {"person": name},
                  "person")


@_logged_in
def tw_unfollow(ctx: PlanContext) -> Action | None:
    name = pick(ctx, list(_api(ctx).following_list))
    if name is None:
        return None
    return Action("tw.unfollow", (call("unfollow_user", username_to_unfollow=name),),
                  {"person": name})


def tw_get(ctx: PlanContext) -> Action | None:
    found = _tweet(ctx)
    if found is None:
        return None
    return Action("tw.get", (call("get_tweet", tweet_id=found[0]["id"]),), {"ref": found[1]})


def tw_comments(ctx: PlanContext) -> Action | None:
    found = _tweet(ctx)
    if found is None:
        return None
    return Action("tw.comments", (call("get_tweet_comments", tweet_id=found[0]["id"]),),
                  {"ref": found[1]})


def tw_user_tweets(ctx: PlanContext) -> Action | None:
    person = pick(ctx, _people(ctx))
    if person is None:
        return None
    return Action("tw.user_tweets", (call("get_user_tweets", username=person),), {"person": person},
                  "person")


def tw_stats(ctx: PlanContext) -> Action | None:
    name = ctx.rng.choice([_api(ctx).username, *_people(ctx)])
    return Action("tw.stats", (call("get_user_stats", username=name),), {"person": name})


def tw_search(ctx: PlanContext) -> Action | None:
    words = sorted({w for t in _api(ctx).tweets.values() for w in words_of(t["content"])})
    keyword = pick(ctx, words)
    if keyword is None:
        return None
    return Action("tw.search", (call("search_tweets", keyword=keyword),), {"keyword": quoted(keyword)},
                  "keyword")


PROPOSERS = (tw_post, tw_post, tw_post_mention, tw_retweet, tw_comment, tw_mention, tw_follow,
             tw_unfollow, tw_get, tw_comments, tw_user_tweets, tw_stats, tw_search,
             _logged_in(query("tw.following", "list_all_following")),
             query("tw.login_status", "posting_get_login_status"))
