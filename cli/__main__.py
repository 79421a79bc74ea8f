from redrafter_mlx.cli.main import main

main()
