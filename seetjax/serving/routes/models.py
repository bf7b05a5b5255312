"""GET /v1/models and /v1/models/{model_id}: the one model this server serves."""

from __future__ import annotations

from fastapi import APIRouter

from seetjax.serving.deps import Server, ServerDep
from seetjax.serving.responses import ModelCard, ModelList

router = APIRouter(prefix="/v1", tags=["models"])


def _card(server: Server) -> ModelCard:
    return ModelCard(id=server.config.model_name, created=server.created,
                     max_model_len=server.engine.max_context)


@router.get("/models", response_model=ModelList)
async def list_models(server: ServerDep) -> ModelList:
    return ModelList(data=[_card(server)])


@router.get("/models/{model_id:path}", response_model=ModelCard)
async def retrieve_model(model_id: str, server: ServerDep) -> ModelCard:
    server.check_model(model_id)
    return _card(server)
