//! The Airflow 3.3.2 tables this tool works on, as `airflow db migrate` creates them, for
//! sandbox metastores (the demo, the tests, trying the tool before pointing it at production).
//!
//! Only the tables the state store touches are created: `dag_run`, `task_instance`, `asset`,
//! `asset_active`, `task_state_store`, `asset_state_store` and `alembic_version`, with Airflow's
//! column types, keys, indexes and constraint names (plus key-only stand-ins for the tables
//! that `dag_run`'s and `task_instance`'s foreign keys name). A sandbox also gets a marker table, so the commands that
//! add dag runs and assets refuse to run against a real metastore.

/// The Alembic revision of Airflow 3.3.2.
pub(crate) const AIRFLOW_33_ALEMBIC_REVISION: &str = "d2f4e1b3c5a7";

/// The Airflow tables a sandbox creates, which `sandbox create` refuses to overwrite.
pub(crate) const AIRFLOW_TABLES: &[&str] = &[
    "dag_run",
    "task_instance",
    "asset",
    "asset_active",
    "task_state_store",
    "asset_state_store",
    "alembic_version",
];

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
    // task_instance's foreign keys name `trigger` too; a key-only stand-in, like the others.
    r#"CREATE TABLE "trigger" (id INTEGER NOT NULL, CONSTRAINT trigger_pkey PRIMARY KEY (id))"#,
    r#"CREATE TABLE task_instance (
	id CHAR(32) NOT NULL, 
	task_id VARCHAR(250) NOT NULL, 
	dag_id VARCHAR(250) NOT NULL, 
	run_id VARCHAR(250) NOT NULL, 
	map_index INTEGER DEFAULT '-1' NOT NULL, 
	start_date TIMESTAMP, 
	end_date TIMESTAMP, 
	duration FLOAT, 
	state VARCHAR(20), 
	try_number INTEGER NOT NULL, 
	max_tries INTEGER DEFAULT '-1' NOT NULL, 
	hostname VARCHAR(1000), 
	unixname VARCHAR(1000), 
	pool VARCHAR(256) NOT NULL, 
	pool_slots INTEGER NOT NULL, 
	queue VARCHAR(256), 
	priority_weight INTEGER, 
	operator VARCHAR(1000), 
	custom_operator_name VARCHAR(1000), 
	queued_dttm TIMESTAMP, 
	scheduled_dttm TIMESTAMP, 
	queued_by_job_id INTEGER, 
	last_heartbeat_at TIMESTAMP, 
	pid INTEGER, 
	executor VARCHAR(1000), 
	executor_config BLOB, 
	updated_at TIMESTAMP, 
	rendered_map_index VARCHAR(250), 
	context_carrier JSON, 
	span_status VARCHAR(250) DEFAULT 'not_started' NOT NULL, 
	external_executor_id TEXT, 
	trigger_id INTEGER, 
	trigger_timeout TIMESTAMP, 
	next_method VARCHAR(1000), 
	next_kwargs JSON, 
	task_display_name VARCHAR(2000), 
	dag_version_id CHAR(32), 
	retry_delay_override FLOAT, 
	retry_reason VARCHAR(500), 
	CONSTRAINT task_instance_pkey PRIMARY KEY (id), 
	CONSTRAINT task_instance_composite_key UNIQUE (dag_id, task_id, run_id, map_index), 
	CONSTRAINT task_instance_trigger_id_fkey FOREIGN KEY(trigger_id) REFERENCES "trigger" (id) ON DELETE CASCADE, 
	CONSTRAINT task_instance_dag_run_fkey FOREIGN KEY(dag_id, run_id) REFERENCES dag_run (dag_id, run_id) ON DELETE CASCADE, 
	CONSTRAINT task_instance_dag_version_id_fkey FOREIGN KEY(dag_version_id) REFERENCES dag_version (id) ON DELETE RESTRICT
)"#,
    "CREATE INDEX ti_state ON task_instance (state)",
    "CREATE INDEX ti_dag_run ON task_instance (dag_id, run_id)",
    "CREATE INDEX ti_trigger_id ON task_instance (trigger_id)",
    "CREATE INDEX ti_pool ON task_instance (pool, state, priority_weight)",
    "CREATE INDEX ti_state_lkp ON task_instance (dag_id, task_id, run_id, state)",
    "CREATE INDEX ti_dag_version_id ON task_instance (dag_version_id)",
    "CREATE INDEX ti_heartbeat ON task_instance (last_heartbeat_at)",
    "CREATE INDEX ti_dag_state ON task_instance (dag_id, state)",
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
    // task_instance's foreign keys name `trigger` too; a key-only stand-in, like the others.
    "CREATE TABLE trigger (id INTEGER NOT NULL, CONSTRAINT trigger_pkey PRIMARY KEY (id))",
    r#"CREATE TABLE task_instance (
	id UUID NOT NULL, 
	task_id VARCHAR(250) NOT NULL, 
	dag_id VARCHAR(250) NOT NULL, 
	run_id VARCHAR(250) NOT NULL, 
	map_index INTEGER DEFAULT -1 NOT NULL, 
	start_date TIMESTAMP WITH TIME ZONE, 
	end_date TIMESTAMP WITH TIME ZONE, 
	duration FLOAT, 
	state VARCHAR(20), 
	try_number INTEGER NOT NULL, 
	max_tries INTEGER DEFAULT -1 NOT NULL, 
	hostname VARCHAR(1000), 
	unixname VARCHAR(1000), 
	pool VARCHAR(256) NOT NULL, 
	pool_slots INTEGER NOT NULL, 
	queue VARCHAR(256), 
	priority_weight INTEGER, 
	operator VARCHAR(1000), 
	custom_operator_name VARCHAR(1000), 
	queued_dttm TIMESTAMP WITH TIME ZONE, 
	scheduled_dttm TIMESTAMP WITH TIME ZONE, 
	queued_by_job_id INTEGER, 
	last_heartbeat_at TIMESTAMP WITH TIME ZONE, 
	pid INTEGER, 
	executor VARCHAR(1000), 
	executor_config BYTEA, 
	updated_at TIMESTAMP WITH TIME ZONE, 
	rendered_map_index VARCHAR(250), 
	context_carrier JSONB, 
	span_status VARCHAR(250) DEFAULT 'not_started' NOT NULL, 
	external_executor_id TEXT, 
	trigger_id INTEGER, 
	trigger_timeout TIMESTAMP WITH TIME ZONE, 
	next_method VARCHAR(1000), 
	next_kwargs JSONB, 
	task_display_name VARCHAR(2000), 
	dag_version_id UUID, 
	retry_delay_override FLOAT, 
	retry_reason VARCHAR(500), 
	CONSTRAINT task_instance_pkey PRIMARY KEY (id), 
	CONSTRAINT task_instance_composite_key UNIQUE (dag_id, task_id, run_id, map_index), 
	CONSTRAINT task_instance_trigger_id_fkey FOREIGN KEY(trigger_id) REFERENCES trigger (id) ON DELETE CASCADE, 
	CONSTRAINT task_instance_dag_run_fkey FOREIGN KEY(dag_id, run_id) REFERENCES dag_run (dag_id, run_id) ON DELETE CASCADE, 
	CONSTRAINT task_instance_dag_version_id_fkey FOREIGN KEY(dag_version_id) REFERENCES dag_version (id) ON DELETE RESTRICT
)"#,
    "CREATE INDEX ti_state ON task_instance (state)",
    "CREATE INDEX ti_dag_run ON task_instance (dag_id, run_id)",
    "CREATE INDEX ti_trigger_id ON task_instance (trigger_id)",
    "CREATE INDEX ti_pool ON task_instance (pool, state, priority_weight)",
    "CREATE INDEX ti_state_lkp ON task_instance (dag_id, task_id, run_id, state)",
    "CREATE INDEX ti_dag_version_id ON task_instance (dag_version_id)",
    "CREATE INDEX ti_heartbeat ON task_instance (last_heartbeat_at)",
    "CREATE INDEX ti_dag_state ON task_instance (dag_id, state)",
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

/// MySQL/MariaDB DDL, as Airflow 3.3.2 leaves it (`SHOW CREATE TABLE` on MariaDB 10.11 gives
/// back exactly Airflow's tables). Every table names its engine, charset and collation, so a
/// sandbox does not depend on the defaults of the database it is created in.
///
/// `JSON` is what SQLAlchemy emits: MariaDB turns it into `LONGTEXT … utf8mb4_bin CHECK
/// (json_valid(…))`, MySQL keeps a native JSON column, as under Airflow. `UUID` (dag_version's
/// key) is MariaDB 10.7's native type; on servers without it the sandbox uses `CHAR(32)`,
/// which is what SQLAlchemy creates there (see [`MYSQL_UUID_FALLBACK`]). The indexes are
/// declared inline, in the order Airflow's migrations leave them, and the two foreign keys of
/// `dag_run` that have no index of their own get one named after the constraint, as InnoDB
/// names it when it adds one by itself.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const MYSQL_DDL: &[&str] = &[
    // Key-only stand-ins for the tables dag_run's foreign keys name: InnoDB refuses a foreign
    // key to a table that does not exist.
    "CREATE TABLE log_template (
	id INTEGER NOT NULL AUTO_INCREMENT,
	PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
    "CREATE TABLE backfill (
	id INTEGER NOT NULL AUTO_INCREMENT,
	PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
    "CREATE TABLE dag_version (
	id UUID NOT NULL,
	PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
    "CREATE TABLE dag_run (
	id INTEGER NOT NULL AUTO_INCREMENT,
	dag_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	queued_at TIMESTAMP(6) NULL DEFAULT NULL,
	logical_date TIMESTAMP(6) NULL DEFAULT NULL,
	start_date TIMESTAMP(6) NULL DEFAULT NULL,
	end_date TIMESTAMP(6) NULL DEFAULT NULL,
	state VARCHAR(50) DEFAULT NULL,
	run_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	creating_job_id INTEGER DEFAULT NULL,
	run_type VARCHAR(50) NOT NULL,
	triggered_by VARCHAR(50) DEFAULT NULL,
	triggering_user_name VARCHAR(512) DEFAULT NULL,
	conf JSON DEFAULT NULL,
	data_interval_start TIMESTAMP(6) NULL DEFAULT NULL,
	data_interval_end TIMESTAMP(6) NULL DEFAULT NULL,
	run_after TIMESTAMP(6) NOT NULL,
	last_scheduling_decision TIMESTAMP(6) NULL DEFAULT NULL,
	log_template_id INTEGER DEFAULT NULL,
	created_at TIMESTAMP(6) NULL DEFAULT NULL,
	updated_at TIMESTAMP(6) NULL DEFAULT NULL,
	clear_number INTEGER NOT NULL DEFAULT 0,
	backfill_id INTEGER DEFAULT NULL,
	bundle_version VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin DEFAULT NULL,
	scheduled_by_job_id INTEGER DEFAULT NULL,
	context_carrier JSON DEFAULT NULL,
	span_status VARCHAR(250) NOT NULL DEFAULT 'not_started',
	created_dag_version_id UUID DEFAULT NULL,
	partition_key VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin DEFAULT NULL,
	partition_date TIMESTAMP(6) NULL DEFAULT NULL,
	PRIMARY KEY (id),
	UNIQUE KEY dag_run_dag_id_run_id_key (dag_id, run_id),
	UNIQUE KEY dag_run_dag_id_logical_date_key (dag_id, logical_date),
	KEY task_instance_log_template_id_fkey (log_template_id),
	KEY dag_run_backfill_id_fkey (backfill_id),
	KEY idx_dag_run_running_dags (state, dag_id),
	KEY idx_dag_run_run_after (run_after),
	KEY idx_dag_run_dag_id (dag_id),
	KEY idx_dag_run_created_dag_version_id (created_dag_version_id),
	KEY idx_dag_run_queued_dags (state, dag_id),
	KEY dag_id_state (dag_id, state),
	CONSTRAINT created_dag_version_id_fkey FOREIGN KEY (created_dag_version_id) REFERENCES dag_version (id) ON DELETE SET NULL,
	CONSTRAINT dag_run_backfill_id_fkey FOREIGN KEY (backfill_id) REFERENCES backfill (id),
	CONSTRAINT task_instance_log_template_id_fkey FOREIGN KEY (log_template_id) REFERENCES log_template (id) ON DELETE NO ACTION
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
    "CREATE TABLE asset (
	id INTEGER NOT NULL AUTO_INCREMENT,
	name VARCHAR(1500) CHARACTER SET latin1 COLLATE latin1_general_cs NOT NULL,
	uri VARCHAR(1500) CHARACTER SET latin1 COLLATE latin1_general_cs NOT NULL,
	`group` VARCHAR(1500) CHARACTER SET latin1 COLLATE latin1_general_cs NOT NULL,
	extra JSON NOT NULL,
	created_at TIMESTAMP(6) NOT NULL,
	updated_at TIMESTAMP(6) NOT NULL,
	PRIMARY KEY (id),
	UNIQUE KEY idx_asset_name_uri_unique (name, uri)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
    "CREATE TABLE asset_active (
	name VARCHAR(1500) CHARACTER SET latin1 COLLATE latin1_general_cs NOT NULL,
	uri VARCHAR(1500) CHARACTER SET latin1 COLLATE latin1_general_cs NOT NULL,
	PRIMARY KEY (name, uri),
	UNIQUE KEY idx_asset_active_uri_unique (uri),
	UNIQUE KEY idx_asset_active_name_unique (name),
	CONSTRAINT asset_active_asset_name_uri_fkey FOREIGN KEY (name, uri) REFERENCES asset (name, uri) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
    // task_instance's foreign keys name `trigger` too; a key-only stand-in, like the others.
    "CREATE TABLE `trigger` (
	id INTEGER NOT NULL AUTO_INCREMENT,
	PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
    "CREATE TABLE task_instance (
	id UUID NOT NULL,
	task_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	dag_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	run_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	map_index INTEGER NOT NULL DEFAULT -1,
	start_date TIMESTAMP(6) NULL DEFAULT NULL,
	end_date TIMESTAMP(6) NULL DEFAULT NULL,
	duration FLOAT DEFAULT NULL,
	state VARCHAR(20) DEFAULT NULL,
	try_number INTEGER NOT NULL,
	max_tries INTEGER NOT NULL DEFAULT -1,
	hostname VARCHAR(1000) DEFAULT NULL,
	unixname VARCHAR(1000) DEFAULT NULL,
	pool VARCHAR(256) NOT NULL,
	pool_slots INTEGER NOT NULL,
	queue VARCHAR(256) DEFAULT NULL,
	priority_weight INTEGER DEFAULT NULL,
	operator VARCHAR(1000) DEFAULT NULL,
	custom_operator_name VARCHAR(1000) DEFAULT NULL,
	queued_dttm TIMESTAMP(6) NULL DEFAULT NULL,
	scheduled_dttm TIMESTAMP(6) NULL DEFAULT NULL,
	queued_by_job_id INTEGER DEFAULT NULL,
	last_heartbeat_at TIMESTAMP(6) NULL DEFAULT NULL,
	pid INTEGER DEFAULT NULL,
	executor VARCHAR(1000) DEFAULT NULL,
	executor_config BLOB DEFAULT NULL,
	updated_at TIMESTAMP(6) NULL DEFAULT NULL,
	rendered_map_index VARCHAR(250) DEFAULT NULL,
	context_carrier JSON DEFAULT NULL,
	span_status VARCHAR(250) NOT NULL DEFAULT 'not_started',
	external_executor_id TEXT DEFAULT NULL,
	trigger_id INTEGER DEFAULT NULL,
	trigger_timeout TIMESTAMP(6) NULL DEFAULT NULL,
	next_method VARCHAR(1000) DEFAULT NULL,
	next_kwargs JSON DEFAULT NULL,
	task_display_name VARCHAR(2000) DEFAULT NULL,
	dag_version_id UUID DEFAULT NULL,
	retry_delay_override FLOAT DEFAULT NULL,
	retry_reason VARCHAR(500) DEFAULT NULL,
	PRIMARY KEY (id),
	UNIQUE KEY task_instance_composite_key (dag_id, task_id, run_id, map_index),
	KEY ti_trigger_id (trigger_id),
	KEY ti_state (state),
	KEY ti_dag_run (dag_id, run_id),
	KEY ti_pool (pool, state, priority_weight),
	KEY ti_heartbeat (last_heartbeat_at),
	KEY ti_dag_version_id (dag_version_id),
	KEY ti_state_lkp (dag_id, task_id, run_id, state),
	KEY ti_dag_state (dag_id, state),
	CONSTRAINT task_instance_dag_run_fkey FOREIGN KEY (dag_id, run_id) REFERENCES dag_run (dag_id, run_id) ON DELETE CASCADE,
	CONSTRAINT task_instance_dag_version_id_fkey FOREIGN KEY (dag_version_id) REFERENCES dag_version (id),
	CONSTRAINT task_instance_trigger_id_fkey FOREIGN KEY (trigger_id) REFERENCES `trigger` (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
    "CREATE TABLE task_state_store (
	id INTEGER NOT NULL AUTO_INCREMENT,
	dag_run_id INTEGER NOT NULL,
	task_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	map_index INTEGER NOT NULL DEFAULT -1,
	`key` VARCHAR(512) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	dag_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	run_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	value MEDIUMTEXT NOT NULL,
	updated_at TIMESTAMP(6) NOT NULL,
	expires_at TIMESTAMP(6) NULL DEFAULT NULL,
	PRIMARY KEY (id),
	UNIQUE KEY task_state_store_uq (dag_run_id, task_id, map_index, `key`),
	KEY idx_task_state_store_lookup (dag_id, run_id, task_id, map_index),
	KEY idx_task_state_store_expires_at (expires_at),
	CONSTRAINT task_state_store_dag_run_fkey FOREIGN KEY (dag_run_id) REFERENCES dag_run (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
    "CREATE TABLE asset_state_store (
	asset_id INTEGER NOT NULL,
	`key` VARCHAR(512) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin NOT NULL,
	value MEDIUMTEXT NOT NULL,
	updated_at TIMESTAMP(6) NOT NULL,
	last_updated_by_kind VARCHAR(16) DEFAULT NULL,
	last_updated_by_dag_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin DEFAULT NULL,
	last_updated_by_run_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin DEFAULT NULL,
	last_updated_by_task_id VARCHAR(250) CHARACTER SET utf8mb3 COLLATE utf8mb3_bin DEFAULT NULL,
	last_updated_by_map_index INTEGER DEFAULT NULL,
	PRIMARY KEY (asset_id, `key`),
	CONSTRAINT asset_state_store_asset_fkey FOREIGN KEY (asset_id) REFERENCES asset (id) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
    "CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL,
	PRIMARY KEY (version_num)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci",
];

/// `(native, fallback)`: the uuid column type in [`MYSQL_DDL`] (dag_version's key, the columns
/// that point at it, task_instance's key) and what replaces it on a server without a UUID type
/// (MySQL, MariaDB before 10.7). The native spelling occurs in `MYSQL_DDL` only as those four
/// column types.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const MYSQL_UUID_FALLBACK: (&str, &str) = (" UUID ", " CHAR(32) ");
