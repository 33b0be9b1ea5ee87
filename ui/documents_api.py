"""The documents routes under /api: upload (multipart, answered 202 with a job), the job's progress, the list,
delete and re-index. They only speak HTTP; assistant/documents.py (through AssistantService) does the work.
The upload body has its own size limit (settings.max_upload_bytes, enforced by ui/server.py's body-limit
middleware for this path and again on the file); with keys configured every route here needs one (ui/auth.py)."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, File, Request, UploadFile
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from assistant.documents import UPLOAD_SUFFIXES

from .admission import rate_limit
from .auth import OwnerDep, bearer_scheme
from .deps import ReadyServiceDep, request_lang
from .schemas import COMMON_ERRORS, error_responses

router = APIRouter(prefix="/api", tags=["documents"], dependencies=[Depends(bearer_scheme)],
                   responses=COMMON_ERRORS)


class UploadAccepted(BaseModel):
    document_id: str
    job_id: str


class JobInfo(BaseModel):
    id: str
    action: Literal["add", "delete", "reindex"]
    document_id: str | None
    status: Literal["queued", "running", "done", "failed"]
    done: int = Field(description="Chunks embedded so far")
    total: int = Field(description="Chunks to embed")
    reason: str = Field(description="Why it failed, in the request's language ('' unless failed)")
    created: float
    finished: float | None
    seconds: float


class DocumentInfo(BaseModel):
    id: str
    name: str
    kind: Literal["upload", "corpus"]
    source: str = Field(description="The source path its passages cite")
    chunks: int = Field(description="Chunks in the live index")
    added: str = Field(description="When it was added (ISO 8601, UTC); for a corpus file, when the index was built")
    size: int | None = Field(description="Bytes")
    status: Literal["indexed", "adding"]
    pinned: bool = Field(False, description="Always in the model's context (GET /api/pinned)")


class DocumentList(BaseModel):
    documents: list[DocumentInfo]


class PinnedInfo(BaseModel):
    enabled: bool = Field(description="Whether pinned context is on (setting pinned_context)")
    sources: list[str] = Field(description="The pinned documents' source paths, in prefix order")
    passages: int = Field(description="Their passages, numbered [1]..[passages] in the prefix")
    tokens: int = Field(description="Tokens of the prefix (rules and pinned passages)")
    budget: int = Field(description="The most it may take (setting pinned_token_budget)")


@router.post("/documents", status_code=202, response_model=UploadAccepted, dependencies=[Depends(rate_limit)],
             summary=f"Upload a document ({', '.join(s.lstrip('.') for s in UPLOAD_SUFFIXES)}); it is indexed by "
             "a job (GET /api/jobs/{job_id})", responses=error_responses(409, 413, 415, 422))
async def upload(request: Request, service: ReadyServiceDep, owner: OwnerDep,
                 file: Annotated[UploadFile, File(description="The document")]) -> JSONResponse:
    request.state.lang = request_lang(request)
    limit = service.settings.max_upload_bytes
    data = await file.read(limit + 1)  # one byte more than allowed is enough to refuse it
    accepted = await run_in_threadpool(service.add_document, file.filename or "", data, owner=owner)
    return JSONResponse(accepted, status_code=202)


@router.get("/jobs/{job_id}", response_model=JobInfo, summary="A document job's status and progress",
            responses=error_responses(404))
async def job(job_id: str, request: Request, service: ReadyServiceDep) -> dict[str, Any]:
    return service.document_job(job_id).to_dict(request_lang(request))


@router.get("/documents", response_model=DocumentList, summary="Every document: the uploads and the corpus files")
async def documents(service: ReadyServiceDep, kind: Literal["upload", "corpus"] | None = None) -> dict[str, Any]:
    return {"documents": await run_in_threadpool(service.list_documents, kind)}


@router.delete("/documents/{document_id}", summary="Remove an uploaded document from the index (waits for it)",
               responses=error_responses(404, 409))
async def delete(document_id: str, service: ReadyServiceDep) -> dict[str, Any]:
    return await run_in_threadpool(service.delete_document, document_id)


@router.get("/pinned", response_model=PinnedInfo, summary="The documents always in the model's context")
async def pinned(service: ReadyServiceDep) -> dict[str, Any]:
    return await run_in_threadpool(service.pinned_documents)


@router.put("/documents/{document_id:path}/pin", response_model=PinnedInfo, responses=error_responses(404, 409),
            summary="Pin a document (id, source or name): always in the model's context, within the token budget")
async def pin(document_id: str, service: ReadyServiceDep) -> dict[str, Any]:
    return await run_in_threadpool(service.pin, document_id)


@router.delete("/documents/{document_id:path}/pin", response_model=PinnedInfo, responses=error_responses(404, 409),
               summary="Unpin a document: it stays in the index and is retrieved like any other")
async def unpin(document_id: str, service: ReadyServiceDep) -> dict[str, Any]:
    return await run_in_threadpool(service.unpin, document_id)


@router.post("/documents/reindex", status_code=202, summary="Build the index again now (changed files, the "
             "uploads); a job", responses=error_responses(409))
async def reindex(service: ReadyServiceDep) -> JSONResponse:
    job = await run_in_threadpool(service.reindex)
    return JSONResponse({"job_id": job.id}, status_code=202)
