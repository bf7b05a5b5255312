"""Requests on TradingBot: quotes, orders, funds and the watchlist, logging in when needed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from seetjax.envs.generated import catalog
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
)

_login = password_login("TradingBot", "trade.login", "trading_login",
                        lambda api: api.authenticated)
_logged_in = needs(_login)


def _api(ctx: PlanContext) -> Any:
    return ctx.instance("TradingBot")


def _money(value: float) -> str:
    """Dollars as the user writes them: cents only when there are any."""
    return f"${value}" if isinstance(value, int) else f"${value:.2f}"


def _symbols(ctx: PlanContext) -> list[str]:
    return list(_api(ctx).stocks)


def _order(ctx: PlanContext, allowed: Callable[[dict[str, Any]], bool]
           ) -> tuple[dict[str, Any], str] | None:
    """An order and how the user names it: by id, or by what it trades if the plan placed it."""
    orders = list(_api(ctx).orders.values())
    return named(ctx, [o for o in orders if allowed(o)], orders,
                 predates=lambda o: o["id"] < ctx.initial_config["TradingBot"]["order_counter"],
                 by_id=lambda o: f"order {o['id']}",
                 described=lambda o: f"the {o['order_type'].lower()} order for {o['symbol']} I placed")


def trade_time(ctx: PlanContext) -> Action | None:
    return Action("trade.time", (call("get_current_time"),))


def trade_stock(ctx: PlanContext) -> Action | None:
    symbol = ctx.rng.choice(_symbols(ctx))
    return Action("trade.stock", (call("get_stock_info", symbol=symbol),), {"symbol": symbol},
                  "symbol")


def trade_company(ctx: PlanContext) -> Action | None:
    """A stock named by its company: the ticker comes from get_symbol_by_name's output."""
    known = {name: s for name, s in catalog.company_symbols(ctx.split).items()
             if s in _api(ctx).stocks}
    name = pick(ctx, sorted(known))
    if name is None:
        return None
    return Action("trade.company", (call("get_symbol_by_name", name=name),
                                    call("get_stock_info", symbol=known[name])),
                  {"company": name}, "company")


@_logged_in
def trade_order(ctx: PlanContext) -> Action | None:
    symbol, kind = ctx.rng.choice(_symbols(ctx)), ctx.rng.choice(["Buy", "Sell"])
    price = round(_api(ctx).stocks[symbol]["price"] * ctx.rng.uniform(0.95, 1.05), 2)
    amount = ctx.rng.randint(1, 50)
    return Action(f"trade.{kind.lower()}",
                  (call("place_order", order_type=kind, symbol=symbol, price=price, amount=amount),),
                  {"symbol": symbol, "price": _money(price), "amount": str(amount)}, "price")


@_logged_in
def trade_at_market(ctx: PlanContext) -> Action | None:
    """An order at the current price, which the model reads from get_stock_info first."""
    symbol, kind = ctx.rng.choice(_symbols(ctx)), ctx.rng.choice(["Buy", "Sell"])
    price, amount = _api(ctx).stocks[symbol]["price"], ctx.rng.randint(1, 50)
    return Action(f"trade.{kind.lower()}_market",
                  (call("get_stock_info", symbol=symbol),
                   call("place_order", order_type=kind, symbol=symbol, price=price, amount=amount)),
                  {"symbol": symbol, "amount": str(amount)}, "amount")


def trade_order_details(ctx: PlanContext) -> Action | None:
    found = _order(ctx, lambda o: True)
    if found is None:
        return None
    order, ref = found
    return Action("trade.order_details", (call("get_order_details", order_id=order["id"]),),
                  {"ref": ref})


def trade_cancel(ctx: PlanContext) -> Action | None:
    found = _order(ctx, lambda o: o["status"] in ("Open", "Pending"))
    if found is None:
        return None
    order, ref = found
    return Action("trade.cancel", (call("cancel_order", order_id=order["id"]),), {"ref": ref})


@_logged_in
def trade_fund(ctx: PlanContext) -> Action | None:
    amount = ctx.rng.randrange(100, 10000, 50)
    return Action("trade.fund", (call("fund_account", amount=amount),),
                  {"amount": _money(amount)}, "amount")


@_logged_in
def trade_withdraw(ctx: PlanContext) -> Action | None:
    api = _api(ctx)
    if api.market_status != "Open" or api.account_info["balance"] < 100:
        return None
    amount = ctx.rng.randrange(50, min(5000, int(api.account_info["balance"])), 50)
    return Action("trade.withdraw", (call("withdraw_funds", amount=amount),),
                  {"amount": _money(amount)}, "amount")


def trade_watch(ctx: PlanContext) -> Action | None:
    symbol = pick(ctx, [s for s in _symbols(ctx) if s not in _api(ctx).watch_list])
    if symbol is None:
        return None
    return Action("trade.watch", (call("add_to_watchlist", stock=symbol),), {"symbol": symbol},
                  "symbol")


@_logged_in
def trade_unwatch(ctx: PlanContext) -> Action | None:
    symbol = pick(ctx, list(_api(ctx).watch_list))
    if symbol is None:
        return None
    return Action("trade.unwatch", (call("remove_stock_from_watchlist", symbol=symbol),),
                  {"symbol": symbol})


_SECTORS = ("Technology", "Automobile")


def trade_sector(ctx: PlanContext) -> Action | None:
    sector = ctx.rng.choice(_SECTORS)
    return Action("trade.sector", (call("get_available_stocks", sector=sector),),
                  {"sector": sector.lower()})


def _some_symbols(ctx: PlanContext) -> list[str]:
    symbols = _symbols(ctx)
    return ctx.rng.sample(symbols, ctx.rng.randint(2, min(4, len(symbols))))


def trade_filter(ctx: PlanContext) -> Action | None:
    symbols = _some_symbols(ctx)
    low = ctx.rng.randrange(0, 400, 10)
    high = low + ctx.rng.randrange(50, 600, 10)
    return Action("trade.filter", (call("filter_stocks_by_price", stocks=symbols, min_price=low,
                                        max_price=high),),
                  {"symbols": listed(symbols), "low": _money(low), "high": _money(high)})


def trade_notify(ctx: PlanContext) -> Action | None:
    symbols, threshold = _some_symbols(ctx), ctx.rng.choice([0.1, 0.25, 0.5, 1.0, 1.5])
    return Action("trade.notify", (call("notify_price_change", stocks=symbols,
                                        threshold=threshold),),
                  {"symbols": listed(symbols), "threshold": f"{threshold}%"}, "threshold")


PROPOSERS = (trade_time, trade_stock, trade_stock, trade_company, trade_order, trade_order,
             trade_at_market, trade_order_details, trade_cancel, trade_fund, trade_withdraw,
             _logged_in(query("trade.account", "get_account_info")),
             _logged_in(query("trade.watchlist", "get_watchlist")),
             _logged_in(query("trade.history", "get_order_history")),
             _logged_in(query("trade.transactions", "get_transaction_history")),
             trade_watch, trade_unwatch, trade_sector, trade_filter, trade_notify)
