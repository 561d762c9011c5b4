"""Settings of the REST API process, read from the environment (`GANGQ_*`, `DATABASE_URL`).

Owns names, defaults and checks of the API's own settings. It must not open connections: the
app's lifespan does that from these values.
"""

from __future__ import annotations

import enum
from pathlib import Path

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class AuthMode(enum.StrEnum):
    TOKEN_FILE = "token-file"
    TOKEN_REVIEW = "tokenreview"


class ApiSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GANGQ_", extra="ignore", frozen=True)

    database_url: str = Field(
        default="", validation_alias=AliasChoices("DATABASE_URL", "GANGQ_DATABASE_URL")
    )
    auth_mode: AuthMode = AuthMode.TOKEN_FILE
    token_file: Path | None = None
    token_review_audiences: tuple[str, ...] = ("gangq",)
    """Audiences a Kubernetes token must be meant for (a projected service-account token
    requested with `audience: gangq`); a token for the API server alone is refused."""
