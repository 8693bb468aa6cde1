-- An API key's allow-list of MCP tool servers, as allowed_models is of model aliases: null (every
-- key until now) is every tool server, otherwise the names of the tool servers the key may reach at
-- /mcp/{name}. Names, not ids, like allowed_models: a tool server deleted and created again under
-- its name is the one the key was meant to reach.
alter table api_keys add column allowed_tool_servers text[];
