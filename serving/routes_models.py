"""GET /v1/models (the served versions, newest last, each `<name>@<step>`) and GET /v1/health (liveness, open
without the token: versions, the follower's swaps, batching and recording counters)."""
from __future__ import annotations

from fastapi import APIRouter, Depends

from .http import ServingState, get_serving, guard

router = APIRouter()


@router.get("/v1/models", dependencies=[Depends(guard)])
async def models(st: ServingState = Depends(get_serving)):
    data = [{"id": v.name, "object": "model", "created": v.created, "owned_by": "lachesis",
             "root": st.engine.label, "step": v.step, "sha256": v.sha256} for v in st.engine.versions()]
    return {"object": "list", "data": data}


@router.get("/v1/health")
async def health(st: ServingState = Depends(get_serving)):
    e, r = st.engine, st.recorder
    return {"status": "ok", "model": e.label, "versions": [v.name for v in e.versions()],
            "newest": e.versions()[-1].name if e.versions() else None, "context": e.context,
            "requests": st.requests, "rejected": st.rejected, "failed": st.failed, "unknown_routes": st.unknown_routes,
            "batches": e.batches, "batched_requests": e.batched_requests, "cancelled_rows": e.cancelled_rows,
            "record": r.mode, "recorded": r.recorded, "record_failed": r.failed,
            "follow": st.follower.events if st.follower is not None else None}
