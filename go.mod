module github.com/stratalab/strata

go 1.26

require (
	github.com/sbinet/npyio v0.6.0
	github.com/stretchr/testify v1.12.1
	github.com/x448/float16 v0.8.4
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	gonum.org/v1/gonum v0.9.3 // indirect
)
