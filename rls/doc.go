// Package rls is sluice-rls: a rate-limit service for Envoy
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) that reads
// envoyproxy/ratelimit's config format and decides as that project
// documents, so that it replaces it without a change of behavior.
//
// Service is the decision logic, for a gRPC server of the program's own:
//
//	cfg, err := config.Load("ratelimit.yaml")
//	if err != nil {
//		return err
//	}
//	pb.RegisterRateLimitServiceServer(srv, rls.NewService(cfg, rls.Options{}))
//
// Run is the whole sluice-rls command: the server, health checking,
// reflection, TLS, Prometheus metrics, config reloads and, with
// ServerOptions.Redis, each window's budget shared by the replicas through
// Redis (leases of blocks of it, or every hit counted with
// RedisOptions.Exact) with a local fallback bounded by each replica's share.
// With ServerOptions.Rules it serves sluice rules instead (RulesService): a
// rule file, or the version in force of a rule store the dashboard edits (a
// redis://, postgres:// or mysql:// URL), shared among the replicas through
// sluice's cluster limits with ServerOptions.Redis.
//
// Each limit counts hits in fixed windows aligned to its unit (a minute
// starts at a whole minute; a month is 30 days and a year 365, counted
// from the Unix epoch), as envoyproxy/ratelimit does. docs/rls.md in the
// repository is the guide: Envoy and Istio configuration, the config mapped
// field by field, the behavior when Redis fails, and measurements.
package rls
