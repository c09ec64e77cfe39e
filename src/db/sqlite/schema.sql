-- SQLite DDL, statement by statement as Airflow 3.3.2 leaves it in `sqlite_master`.

-- dag_run has foreign keys to these three tables, and SQLite refuses writes to a table
-- whose foreign keys name a missing table. Their real columns are of no use to the state
-- store, so a sandbox carries only their keys.
CREATE TABLE log_template (id INTEGER NOT NULL, CONSTRAINT log_template_pkey PRIMARY KEY (id));

CREATE TABLE backfill (id INTEGER NOT NULL, CONSTRAINT backfill_pkey PRIMARY KEY (id));

CREATE TABLE dag_version (id CHAR(32) NOT NULL, CONSTRAINT dag_version_pkey PRIMARY KEY (id));

CREATE TABLE dag_run (
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
);

CREATE INDEX idx_dag_run_dag_id ON dag_run (dag_id);

CREATE INDEX idx_dag_run_queued_dags ON dag_run (state, dag_id) WHERE state='queued';

CREATE INDEX idx_dag_run_created_dag_version_id ON dag_run (created_dag_version_id);

CREATE INDEX dag_id_state ON dag_run (dag_id, state);

CREATE INDEX idx_dag_run_running_dags ON dag_run (state, dag_id) WHERE state='running';

CREATE INDEX idx_dag_run_run_after ON dag_run (run_after);

CREATE TABLE asset (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, 
	name VARCHAR(1500) NOT NULL, 
	uri VARCHAR(1500) NOT NULL, 
	"group" VARCHAR(1500) NOT NULL, 
	extra JSON NOT NULL, 
	created_at TIMESTAMP NOT NULL, 
	updated_at TIMESTAMP NOT NULL
);

CREATE UNIQUE INDEX idx_asset_name_uri_unique ON asset (name, uri);

CREATE TABLE asset_active (
	name VARCHAR(1500) NOT NULL, 
	uri VARCHAR(1500) NOT NULL, 
	CONSTRAINT asset_active_pkey PRIMARY KEY (name, uri), 
	CONSTRAINT asset_active_asset_name_uri_fkey FOREIGN KEY(name, uri) REFERENCES asset (name, uri) ON DELETE CASCADE
);

CREATE UNIQUE INDEX idx_asset_active_uri_unique ON asset_active (uri);

CREATE UNIQUE INDEX idx_asset_active_name_unique ON asset_active (name);

-- task_instance's foreign keys name `trigger` too; a key-only stand-in, like the others.
CREATE TABLE "trigger" (id INTEGER NOT NULL, CONSTRAINT trigger_pkey PRIMARY KEY (id));

CREATE TABLE task_instance (
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
);

CREATE INDEX ti_state ON task_instance (state);

CREATE INDEX ti_dag_run ON task_instance (dag_id, run_id);

CREATE INDEX ti_trigger_id ON task_instance (trigger_id);

CREATE INDEX ti_pool ON task_instance (pool, state, priority_weight);

CREATE INDEX ti_state_lkp ON task_instance (dag_id, task_id, run_id, state);

CREATE INDEX ti_dag_version_id ON task_instance (dag_version_id);

CREATE INDEX ti_heartbeat ON task_instance (last_heartbeat_at);

CREATE INDEX ti_dag_state ON task_instance (dag_id, state);

CREATE TABLE task_state_store (
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
);

CREATE INDEX idx_task_state_store_lookup ON task_state_store (dag_id, run_id, task_id, map_index);

CREATE INDEX idx_task_state_store_expires_at ON task_state_store (expires_at);

CREATE TABLE asset_state_store (
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
);

CREATE TABLE alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)
);

-- The sandbox's marker: present only in databases made by `state-store sandbox create`.
CREATE TABLE state_store_sandbox (created_at TIMESTAMP NOT NULL);
