//! The Airflow 3.3.2 tables this tool works on, as `airflow db migrate` creates them, for
//! sandbox metastores (the demo, the tests, trying the tool before pointing it at production).
//!
//! Only the tables the state store touches are created: `dag_run`, `asset`, `asset_active`,
//! `task_state_store`, `asset_state_store` and `alembic_version`, with Airflow's column types,
//! keys, indexes and constraint names (plus key-only stand-ins for the tables `dag_run`'s
//! foreign keys name). A sandbox also gets a marker table, so the commands that
//! add dag runs and assets refuse to run against a real metastore.

/// The Alembic revision of Airflow 3.3.2.
pub(crate) const AIRFLOW_33_ALEMBIC_REVISION: &str = "d2f4e1b3c5a7";

/// Present only in databases created by `state-store sandbox create`.
pub(crate) const SANDBOX_MARKER_TABLE: &str = "state_store_sandbox";

/// SQLite DDL, statement by statement as Airflow 3.3.2 leaves it in `sqlite_master`.
pub(crate) const SQLITE_DDL: &[&str] = &[
    // dag_run has foreign keys to these three tables, and SQLite refuses writes to a table
    // whose foreign keys name a missing table. Their real columns are of no use to the state
    // store, so a sandbox carries only their keys.
    "CREATE TABLE log_template (id INTEGER NOT NULL, CONSTRAINT log_template_pkey PRIMARY KEY (id))",
    "CREATE TABLE backfill (id INTEGER NOT NULL, CONSTRAINT backfill_pkey PRIMARY KEY (id))",
    "CREATE TABLE dag_version (id CHAR(32) NOT NULL, CONSTRAINT dag_version_pkey PRIMARY KEY (id))",
    r#"CREATE TABLE dag_run (
	id INTEGER NOT NULL, 
	dag_id VARCHAR(250) NOT NULL, 
	queued_at TIMESTAMP, 
	logical_date TIMESTAMP, 
	start_date TIMESTAMP, 
	end_date TIMESTAMP, 
	state VARCHAR(50), 
	run_id VARCHAR(250) NOT NULL, 
	creating_job_id INTEGER, 
	run_type VARCHAR(50) NOT NULL, 
	triggered_by VARCHAR(50), 
	triggering_user_name VARCHAR(512), 
	conf JSON, 
	data_interval_start TIMESTAMP, 
	data_interval_end TIMESTAMP, 
	run_after TIMESTAMP NOT NULL, 
	last_scheduling_decision TIMESTAMP, 
	log_template_id INTEGER, 
	created_at TIMESTAMP, 
	updated_at TIMESTAMP, 
	clear_number INTEGER DEFAULT '0' NOT NULL, 
	backfill_id INTEGER, 
	bundle_version VARCHAR(250), 
	scheduled_by_job_id INTEGER, 
	context_carrier JSON, 
	span_status VARCHAR(250) DEFAULT 'not_started' NOT NULL, 
	created_dag_version_id CHAR(32), 
	partition_key VARCHAR(250), 
	partition_date TIMESTAMP, 
	CONSTRAINT dag_run_pkey PRIMARY KEY (id), 
	CONSTRAINT dag_run_dag_id_run_id_key UNIQUE (dag_id, run_id), 
	CONSTRAINT dag_run_dag_id_logical_date_key UNIQUE (dag_id, logical_date), 
	CONSTRAINT task_instance_log_template_id_fkey FOREIGN KEY(log_template_id) REFERENCES log_template (id) ON DELETE NO ACTION, 
	CONSTRAINT dag_run_backfill_id_fkey FOREIGN KEY(backfill_id) REFERENCES backfill (id), 
	CONSTRAINT created_dag_version_id_fkey FOREIGN KEY(created_dag_version_id) REFERENCES dag_version (id) ON DELETE set null
)"#,
    "CREATE INDEX idx_dag_run_dag_id ON dag_run (dag_id)",
    "CREATE INDEX idx_dag_run_queued_dags ON dag_run (state, dag_id) WHERE state='queued'",
    "CREATE INDEX idx_dag_run_created_dag_version_id ON dag_run (created_dag_version_id)",
    "CREATE INDEX dag_id_state ON dag_run (dag_id, state)",
    "CREATE INDEX idx_dag_run_running_dags ON dag_run (state, dag_id) WHERE state='running'",
    "CREATE INDEX idx_dag_run_run_after ON dag_run (run_after)",
    r#"CREATE TABLE asset (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	name VARCHAR(1500) NOT NULL, 
	uri VARCHAR(1500) NOT NULL, 
	"group" VARCHAR(1500) NOT NULL, 
	extra JSON NOT NULL, 
	created_at TIMESTAMP NOT NULL, 
	updated_at TIMESTAMP NOT NULL
)"#,
    "CREATE UNIQUE INDEX idx_asset_name_uri_unique ON asset (name, uri)",
    r#"CREATE TABLE asset_active (
	name VARCHAR(1500) NOT NULL, 
	uri VARCHAR(1500) NOT NULL, 
	CONSTRAINT asset_active_pkey PRIMARY KEY (name, uri), 
	CONSTRAINT asset_active_asset_name_uri_fkey FOREIGN KEY(name, uri) REFERENCES asset (name, uri) ON DELETE CASCADE
)"#,
    "CREATE UNIQUE INDEX idx_asset_active_uri_unique ON asset_active (uri)",
    "CREATE UNIQUE INDEX idx_asset_active_name_unique ON asset_active (name)",
    r#"CREATE TABLE task_state_store (
	id INTEGER NOT NULL, 
	dag_run_id INTEGER NOT NULL, 
	task_id VARCHAR(250) NOT NULL, 
	map_index INTEGER DEFAULT '-1' NOT NULL, 
	"key" VARCHAR(512) NOT NULL, 
	dag_id VARCHAR(250) NOT NULL, 
	run_id VARCHAR(250) NOT NULL, 
	value TEXT NOT NULL, 
	updated_at TIMESTAMP NOT NULL, 
	expires_at TIMESTAMP, 
	CONSTRAINT task_state_store_pkey PRIMARY KEY (id), 
	CONSTRAINT task_state_store_uq UNIQUE (dag_run_id, task_id, map_index, "key"), 
	CONSTRAINT task_state_store_dag_run_fkey FOREIGN KEY(dag_run_id) REFERENCES dag_run (id) ON DELETE CASCADE
)"#,
    "CREATE INDEX idx_task_state_store_lookup ON task_state_store (dag_id, run_id, task_id, map_index)",
    "CREATE INDEX idx_task_state_store_expires_at ON task_state_store (expires_at)",
    r#"CREATE TABLE asset_state_store (
	asset_id INTEGER NOT NULL, 
	"key" VARCHAR(512) NOT NULL, 
	value TEXT NOT NULL, 
	updated_at TIMESTAMP NOT NULL, 
	last_updated_by_kind VARCHAR(16), 
	last_updated_by_dag_id VARCHAR(250), 
	last_updated_by_run_id VARCHAR(250), 
	last_updated_by_task_id VARCHAR(250), 
	last_updated_by_map_index INTEGER, 
	CONSTRAINT asset_state_store_pkey PRIMARY KEY (asset_id, "key"), 
	CONSTRAINT asset_state_store_asset_fkey FOREIGN KEY(asset_id) REFERENCES asset (id) ON DELETE CASCADE
)"#,
    r#"CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
)"#,
];

/// PostgreSQL DDL, as SQLAlchemy emits it for Airflow 3.3.2's migrations: `SERIAL` ids (an
/// integer sequence `<table>_id_seq` owned by the column), `timestamp with time zone` for every
/// timestamp, `jsonb` for dag_run's JSON columns. Names are unqualified: the connection's
/// `search_path` puts them in `[database] sql_alchemy_schema` when that is set. Indexes come
/// before the tables whose foreign keys need them (asset_active references asset's unique
/// (name, uri) index).
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES_DDL: &[&str] = &[
    // Key-only stand-ins for the tables dag_run's foreign keys name: PostgreSQL refuses a
    // foreign key to a missing table at CREATE time. Airflow's dag_version.id is a uuid.
    "CREATE TABLE log_template (id INTEGER NOT NULL, CONSTRAINT log_template_pkey PRIMARY KEY (id))",
    "CREATE TABLE backfill (id INTEGER NOT NULL, CONSTRAINT backfill_pkey PRIMARY KEY (id))",
    "CREATE TABLE dag_version (id UUID NOT NULL, CONSTRAINT dag_version_pkey PRIMARY KEY (id))",
    r#"CREATE TABLE dag_run (
	id SERIAL NOT NULL, 
	dag_id VARCHAR(250) NOT NULL, 
	queued_at TIMESTAMP WITH TIME ZONE, 
	logical_date TIMESTAMP WITH TIME ZONE, 
	start_date TIMESTAMP WITH TIME ZONE, 
	end_date TIMESTAMP WITH TIME ZONE, 
	state VARCHAR(50), 
	run_id VARCHAR(250) NOT NULL, 
	creating_job_id INTEGER, 
	run_type VARCHAR(50) NOT NULL, 
	triggered_by VARCHAR(50), 
	triggering_user_name VARCHAR(512), 
	conf JSONB, 
	data_interval_start TIMESTAMP WITH TIME ZONE, 
	data_interval_end TIMESTAMP WITH TIME ZONE, 
	run_after TIMESTAMP WITH TIME ZONE NOT NULL, 
	last_scheduling_decision TIMESTAMP WITH TIME ZONE, 
	log_template_id INTEGER, 
	created_at TIMESTAMP WITH TIME ZONE, 
	updated_at TIMESTAMP WITH TIME ZONE, 
	clear_number INTEGER DEFAULT 0 NOT NULL, 
	backfill_id INTEGER, 
	bundle_version VARCHAR(250), 
	scheduled_by_job_id INTEGER, 
	context_carrier JSONB, 
	span_status VARCHAR(250) DEFAULT 'not_started' NOT NULL, 
	created_dag_version_id UUID, 
	partition_key VARCHAR(250), 
	partition_date TIMESTAMP WITH TIME ZONE, 
	CONSTRAINT dag_run_pkey PRIMARY KEY (id), 
	CONSTRAINT dag_run_dag_id_run_id_key UNIQUE (dag_id, run_id), 
	CONSTRAINT dag_run_dag_id_logical_date_key UNIQUE (dag_id, logical_date), 
	CONSTRAINT task_instance_log_template_id_fkey FOREIGN KEY(log_template_id) REFERENCES log_template (id), 
	CONSTRAINT dag_run_backfill_id_fkey FOREIGN KEY(backfill_id) REFERENCES backfill (id), 
	CONSTRAINT created_dag_version_id_fkey FOREIGN KEY(created_dag_version_id) REFERENCES dag_version (id) ON DELETE SET NULL
)"#,
    "CREATE INDEX idx_dag_run_dag_id ON dag_run (dag_id)",
    "CREATE INDEX idx_dag_run_queued_dags ON dag_run (state, dag_id) WHERE state = 'queued'",
    "CREATE INDEX idx_dag_run_created_dag_version_id ON dag_run (created_dag_version_id)",
    "CREATE INDEX dag_id_state ON dag_run (dag_id, state)",
    "CREATE INDEX idx_dag_run_running_dags ON dag_run (state, dag_id) WHERE state = 'running'",
    "CREATE INDEX idx_dag_run_run_after ON dag_run (run_after)",
    r#"CREATE TABLE asset (
	id SERIAL NOT NULL, 
	name VARCHAR(1500) NOT NULL, 
	uri VARCHAR(1500) NOT NULL, 
	"group" VARCHAR(1500) NOT NULL, 
	extra JSON NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	CONSTRAINT asset_pkey PRIMARY KEY (id)
)"#,
    "CREATE UNIQUE INDEX idx_asset_name_uri_unique ON asset (name, uri)",
    r#"CREATE TABLE asset_active (
	name VARCHAR(1500) NOT NULL, 
	uri VARCHAR(1500) NOT NULL, 
	CONSTRAINT asset_active_pkey PRIMARY KEY (name, uri), 
	CONSTRAINT asset_active_asset_name_uri_fkey FOREIGN KEY(name, uri) REFERENCES asset (name, uri) ON DELETE CASCADE
)"#,
    "CREATE UNIQUE INDEX idx_asset_active_uri_unique ON asset_active (uri)",
    "CREATE UNIQUE INDEX idx_asset_active_name_unique ON asset_active (name)",
    r#"CREATE TABLE task_state_store (
	id SERIAL NOT NULL, 
	dag_run_id INTEGER NOT NULL, 
	task_id VARCHAR(250) NOT NULL, 
	map_index INTEGER DEFAULT -1 NOT NULL, 
	"key" VARCHAR(512) NOT NULL, 
	dag_id VARCHAR(250) NOT NULL, 
	run_id VARCHAR(250) NOT NULL, 
	value TEXT NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	expires_at TIMESTAMP WITH TIME ZONE, 
	CONSTRAINT task_state_store_pkey PRIMARY KEY (id), 
	CONSTRAINT task_state_store_uq UNIQUE (dag_run_id, task_id, map_index, "key"), 
	CONSTRAINT task_state_store_dag_run_fkey FOREIGN KEY(dag_run_id) REFERENCES dag_run (id) ON DELETE CASCADE
)"#,
    "CREATE INDEX idx_task_state_store_lookup ON task_state_store (dag_id, run_id, task_id, map_index)",
    "CREATE INDEX idx_task_state_store_expires_at ON task_state_store (expires_at)",
    r#"CREATE TABLE asset_state_store (
	asset_id INTEGER NOT NULL, 
	"key" VARCHAR(512) NOT NULL, 
	value TEXT NOT NULL, 
	updated_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	last_updated_by_kind VARCHAR(16), 
	last_updated_by_dag_id VARCHAR(250), 
	last_updated_by_run_id VARCHAR(250), 
	last_updated_by_task_id VARCHAR(250), 
	last_updated_by_map_index INTEGER, 
	CONSTRAINT asset_state_store_pkey PRIMARY KEY (asset_id, "key"), 
	CONSTRAINT asset_state_store_asset_fkey FOREIGN KEY(asset_id) REFERENCES asset (id) ON DELETE CASCADE
)"#,
    r#"CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
)"#,
];
