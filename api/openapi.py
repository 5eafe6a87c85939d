"""The OpenAPI 3.1 schema of a served index's HTTP API (`GET /openapi.json`)."""

from __future__ import annotations

from typing import Any

from tapt.api.rooms import Rooms

_ERROR = {"description": "Refused or failed: one line under `error`.",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def schema(rooms: Rooms) -> dict[str, Any]:
    """The schema, with this server's bounds in the descriptions."""
    from tapt import __version__

    def refusals(*codes: int) -> dict[str, Any]:
        return {str(code): _ERROR for code in codes}

    request = {
        "type": "object", "additionalProperties": False, "required": ["method", "budget"],
        "properties": {
            "id": {"type": ["string", "number", "null"], "description": "Echoed."},
            "method": {"type": "string", "description": "A selection method (GET /index)."},
            "task": {"description": "The task: a list of sentences; or, where the server has "
                                    "a task root, a path or {\"files\": [paths]} under it.",
                     "oneOf": [{"type": "array", "items": {"type": "string"},
                                "maxItems": rooms.max_task},
                               {"type": "string"},
                               {"type": "object", "properties": {
                                   "files": {"type": "array", "items": {"type": "string"}}}}]},
            "budget": {"type": ["string", "number"],
                       "description": f"0.2, 5000, 20000sent, 2Mtok; reaching at most "
                                      f"{rooms.max_budget:,} sentences."},
            "params": {"type": "object", "description": "The method's parameters."},
            "segment_size": {"type": "integer", "minimum": 1},
            "seed": {"type": "integer", "minimum": 0},
            "out": {"type": "string", "description": "\"-\": the selection's lines in the "
                                                    "answer; a path under the server's out "
                                                    "root: written there, a download link in "
                                                    "the answer."},
            "overwrite": {"type": "boolean"},
            "explain": {"type": "boolean", "description": "Why each segment was picked."}}}
    answer = {"type": "object", "properties": {
        "id": {}, "method": {"type": "string"}, "segments": {"type": "integer"},
        "sentences": {"type": "integer"}, "ids": {"type": "array", "items": {"type": "integer"}},
        "out": {"type": ["string", "null"]}, "download": {"type": "string"},
        "seconds": {"type": "number"},
        "selection": {"type": "array", "items": {"type": "object"}},
        "explain": {"type": "object"}}}
    secured = [{"bearer": []}] if rooms.token_sha256 else []
    return {
        "openapi": "3.1.0",
        "info": {"title": "tapt served index", "version": __version__,
                 "description": f"Bodies up to {rooms.max_body:,} bytes, {rooms.max_concurrent} "
                                f"requests in flight, {rooms.request_timeout:g} s a request."},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Request": request, "Answer": answer,
                        "Error": {"type": "object", "required": ["error"],
                                  "properties": {"id": {}, "error": {"type": "string"}}}}},
        "security": secured,
        "paths": {
            "/select": {"post": {
                "summary": "Select the segments most like a task.",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Request"}}}},
                "responses": {"200": {"description": "The selection.", "content": {
                    "application/json": {"schema": {"$ref": "#/components/schemas/Answer"}}}},
                    **refusals(400, 401, 403, 413, 429, 503)}}},
            "/index": {"get": {"summary": "The index's summary and this server's bounds.",
                               "responses": {"200": {"description": "The summary."},
                                             **refusals(401)}}},
            "/health": {"get": {"summary": "Whether the serving actors answer (dead or hung "
                                           "ones are replaced).", "security": [],
                                "responses": {"200": {"description": "Serving."},
                                              **refusals(503)}}},
            "/context": {"get": {
                "summary": "The sentences of rows [start, stop) with their document's "
                           "neighbours.",
                "parameters": [{"name": n, "in": "query", "required": n != "around",
                                "schema": {"type": "integer"}}
                               for n in ("start", "stop", "around")],
                "responses": {"200": {"description": "The sentences."}, **refusals(400, 401)}}},
            "/files/{name}": {"get": {
                "summary": "A selection written under the out root.",
                "parameters": [{"name": "name", "in": "path", "required": True,
                                "schema": {"type": "string"}}],
                "responses": {"200": {"description": "The file."},
                              **refusals(401, 403, 404)}}}}}
